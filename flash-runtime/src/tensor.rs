//! Element types and 4-d tensor views over cudarc device memory.
//!
//! A view is a device buffer (a [`CudaView`] / [`CudaViewMut`]) plus a shape
//! `[batch, seqlen, heads, head_dim]` and strides in elements. Views check nothing when
//! built; [`crate::FlashAttention::forward`] validates them (through [`crate::validate`])
//! before any launch.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DeviceRepr, ValidAsZeroBits};
use flash_codegen::DType;

use crate::validate::TensorDesc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the attention kernels take: `half::f16` or `half::bf16` (sealed).
pub trait Element:
    sealed::Sealed + DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static
{
    /// The code generator's name for this type.
    const DTYPE: DType;
    /// Round an f32 to this type (round to nearest even).
    fn from_f32(x: f32) -> Self;
    /// Widen to f32 (exact).
    fn to_f32(self) -> f32;
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}

/// Strides (in elements) of a contiguous `[b, s, h, d]` tensor. Saturates instead of
/// overflowing; validation then reports the tensor as larger than its buffer.
pub fn contiguous_strides(shape: [usize; 4]) -> [usize; 4] {
    let [_, s, h, d] = shape;
    let hd = h.saturating_mul(d);
    [s.saturating_mul(hd), hd, d, 1]
}

/// The shape `[b, s, h, d]` and strides of a contiguous `[b, h, s, d]` buffer (PyTorch's
/// SDPA layout: heads before the sequence) seen as the kernels' `[b, s, h, d]`.
/// Saturates like [`contiguous_strides`].
pub fn bhsd_layout(bhsd: [usize; 4]) -> ([usize; 4], [usize; 4]) {
    let [b, h, s, d] = bhsd;
    let sd = s.saturating_mul(d);
    ([b, s, h, d], [h.saturating_mul(sd), d, sd, 1])
}

/// Something that can be read as a device view: `&CudaSlice<T>`, `CudaView<T>`, `&CudaView<T>`.
pub trait IntoDeviceView<'a, T> {
    /// The view over the whole buffer.
    fn into_device_view(self) -> CudaView<'a, T>;
}

impl<'a, T> IntoDeviceView<'a, T> for &'a CudaSlice<T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self.as_view()
    }
}

impl<'a, T> IntoDeviceView<'a, T> for CudaView<'a, T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self
    }
}

impl<'a, T> IntoDeviceView<'a, T> for &CudaView<'a, T> {
    fn into_device_view(self) -> CudaView<'a, T> {
        self.slice(..)
    }
}

/// Something that can be written as a device view: `&mut CudaSlice<T>`, `CudaViewMut<T>`.
pub trait IntoDeviceViewMut<'a, T> {
    /// The mutable view over the whole buffer.
    fn into_device_view_mut(self) -> CudaViewMut<'a, T>;
}

impl<'a, T> IntoDeviceViewMut<'a, T> for &'a mut CudaSlice<T> {
    fn into_device_view_mut(self) -> CudaViewMut<'a, T> {
        self.as_view_mut()
    }
}

impl<'a, T> IntoDeviceViewMut<'a, T> for CudaViewMut<'a, T> {
    fn into_device_view_mut(self) -> CudaViewMut<'a, T> {
        self
    }
}

/// A read-only `[batch, seqlen, heads, head_dim]` tensor over device memory (q, k, v).
///
/// Element `(b, s, h, d)` lives at `b * strides[0] + s * strides[1] + h * strides[2] + d`
/// elements from the start of the view; the last stride must be 1.
#[derive(Debug)]
pub struct Tensor4<'a, T> {
    pub(crate) view: CudaView<'a, T>,
    shape: [usize; 4],
    strides: [usize; 4],
}

impl<'a, T> Tensor4<'a, T> {
    /// A contiguous (row-major) tensor of `shape` at the start of `data`.
    pub fn contiguous(data: impl IntoDeviceView<'a, T>, shape: [usize; 4]) -> Self {
        Self::strided(data, shape, contiguous_strides(shape))
    }

    /// A contiguous `[batch, heads, seqlen, head_dim]` buffer (PyTorch's SDPA layout), seen
    /// as the kernels' `[batch, seqlen, heads, head_dim]` through its strides
    /// ([`bhsd_layout`]); `bhsd` is the buffer's own shape.
    pub fn from_bhsd(data: impl IntoDeviceView<'a, T>, bhsd: [usize; 4]) -> Self {
        let (shape, strides) = bhsd_layout(bhsd);
        Self::strided(data, shape, strides)
    }

    /// A tensor with explicit strides (in elements), e.g. q sliced out of a packed
    /// `[b, s, 3, h, d]` qkv buffer: `strided(buf.slice(0..), [b, s, h, d], [s*3*h*d, 3*h*d, d, 1])`.
    pub fn strided(
        data: impl IntoDeviceView<'a, T>,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Self {
        Tensor4 {
            view: data.into_device_view(),
            shape,
            strides,
        }
    }

    /// `[batch, seqlen, heads, head_dim]`.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Strides in elements, same order as the shape.
    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }

    /// Elements in the underlying device view.
    pub fn buffer_len(&self) -> usize {
        self.view.len()
    }
}

impl<T: Element> Tensor4<'_, T> {
    /// What the checks see of this tensor, with its view starting at device address `ptr`.
    pub(crate) fn desc(&self, ptr: u64) -> TensorDesc {
        desc::<T>(self.shape, self.strides, ptr, self.view.len())
    }
}

impl<T: Element> Tensor4Mut<'_, T> {
    /// What the checks see of this tensor, with its view starting at device address `ptr`.
    pub(crate) fn desc(&self, ptr: u64) -> TensorDesc {
        desc::<T>(self.shape, self.strides, ptr, self.view.len())
    }
}

fn desc<T: Element>(shape: [usize; 4], strides: [usize; 4], ptr: u64, len: usize) -> TensorDesc {
    TensorDesc {
        shape,
        strides,
        ptr,
        len,
        dtype: T::DTYPE,
    }
}

/// A writable `[batch, seqlen, heads, head_dim]` tensor over device memory (o).
/// Same layout rules as [`Tensor4`]; in addition no two elements may share memory.
#[derive(Debug)]
pub struct Tensor4Mut<'a, T> {
    pub(crate) view: CudaViewMut<'a, T>,
    shape: [usize; 4],
    strides: [usize; 4],
}

impl<'a, T> Tensor4Mut<'a, T> {
    /// A contiguous (row-major) tensor of `shape` at the start of `data`.
    pub fn contiguous(data: impl IntoDeviceViewMut<'a, T>, shape: [usize; 4]) -> Self {
        Self::strided(data, shape, contiguous_strides(shape))
    }

    /// A contiguous `[batch, heads, seqlen, head_dim]` buffer seen as `[batch, seqlen,
    /// heads, head_dim]` (see [`Tensor4::from_bhsd`]).
    pub fn from_bhsd(data: impl IntoDeviceViewMut<'a, T>, bhsd: [usize; 4]) -> Self {
        let (shape, strides) = bhsd_layout(bhsd);
        Self::strided(data, shape, strides)
    }

    /// A tensor with explicit strides (in elements).
    pub fn strided(
        data: impl IntoDeviceViewMut<'a, T>,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Self {
        Tensor4Mut {
            view: data.into_device_view_mut(),
            shape,
            strides,
        }
    }

    /// `[batch, seqlen, heads, head_dim]`.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Strides in elements, same order as the shape.
    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }

    /// Elements in the underlying device view.
    pub fn buffer_len(&self) -> usize {
        self.view.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_are_row_major() {
        assert_eq!(contiguous_strides([2, 3, 4, 8]), [96, 32, 8, 1]);
        assert_eq!(contiguous_strides([1, usize::MAX, 2, 8])[0], usize::MAX);
    }

    /// Element (b, s, h, d) of the [b, s, h, d] view sits where a contiguous [b, h, s, d]
    /// buffer keeps it.
    #[test]
    fn bhsd_layout_addresses_the_pytorch_order() {
        let (bhsd, (shape, st)) = ([2, 3, 5, 8], bhsd_layout([2, 3, 5, 8]));
        assert_eq!(shape, [2, 5, 3, 8]);
        for (b, s, h, d) in [(0, 0, 0, 0), (1, 4, 2, 7), (1, 0, 2, 3), (0, 3, 1, 5)] {
            let want = ((b * bhsd[1] + h) * bhsd[2] + s) * bhsd[3] + d;
            assert_eq!(b * st[0] + s * st[1] + h * st[2] + d * st[3], want);
        }
    }

    #[test]
    fn element_round_trip() {
        assert_eq!(half::bf16::from_f32(1.5).to_f32(), 1.5);
        assert_eq!(<half::f16 as Element>::DTYPE, DType::F16);
        assert!(
            <half::bf16 as Element>::from_f32(f32::NAN)
                .to_f32()
                .is_nan()
        );
    }
}
