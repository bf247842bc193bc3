//! TMA tensor maps for the sm_90a kernels: the 128-byte `CUtensorMap` a kernel takes by
//! value (`.param .align 64 .b8 NAME[128]`), encoded on the host by the driver's
//! `cuTensorMapEncodeTiled`.
//!
//! The encoder is looked up in the driver library itself (not through cudarc's bindings,
//! which have it only under their CUDA 12.0+ version features): any linking mode and any
//! cudarc version feature an application picks can build maps, on a driver that has the
//! function (CUDA 12.0, r525, and newer). Every limit the driver documents is checked first,
//! so a layout TMA cannot take is a typed [`FlashError::TensorMap`] naming it, and the
//! caller can run the sm_80 kernels instead.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::DeviceRepr;
use flash_codegen::DType;

use crate::attention::DRIVER_LIBRARIES;
use crate::error::{FlashError, Result};

/// The shared-memory swizzle a map writes its boxes with (`CUtensorMapSwizzle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaSwizzle {
    /// Rows stored as they are.
    None,
    /// 16-byte chunks XOR-ed within 32-byte rows.
    B32,
    /// ... within 64-byte rows.
    B64,
    /// ... within 128-byte rows (8-row, 1024-byte atoms): what `wgmma` reads.
    B128,
}

impl TmaSwizzle {
    /// The driver's enum value.
    pub fn code(self) -> u32 {
        match self {
            TmaSwizzle::None => 0,
            TmaSwizzle::B32 => 1,
            TmaSwizzle::B64 => 2,
            TmaSwizzle::B128 => 3,
        }
    }
    /// The widest inner box row in bytes (`None`: no limit but the box's).
    pub fn span(self) -> Option<u64> {
        match self {
            TmaSwizzle::None => None,
            TmaSwizzle::B32 => Some(32),
            TmaSwizzle::B64 => Some(64),
            TmaSwizzle::B128 => Some(128),
        }
    }
}

/// What a tensor map describes: a tensor of `dims` elements (innermost first, the
/// innermost contiguous), `strides` in bytes of dims 1.. (one fewer than `dims`), and the
/// box one copy moves. This is also what a cuda-python user passes to
/// `cuTensorMapEncodeTiled` (element strides 1, no interleave, L2 promotion 128 B, zero
/// fill out of bounds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapLayout {
    /// Element type.
    pub dtype: DType,
    /// Extent of each dimension, innermost first (1 to 5 dimensions).
    pub dims: Vec<u64>,
    /// Byte stride of dimensions 1.. (`dims.len() - 1` of them).
    pub strides: Vec<u64>,
    /// Box extent per dimension, innermost first.
    pub box_dims: Vec<u32>,
    /// The boxes' shared-memory swizzle.
    pub swizzle: TmaSwizzle,
}

/// The driver's `CU_TENSOR_MAP_DATA_TYPE_*` of a dtype.
fn dtype_code(t: DType) -> u32 {
    match t {
        DType::F16 => 6,
        DType::Bf16 => 9,
    }
}

impl TensorMapLayout {
    /// A `[b, s, h, d]` tensor with element strides `[sb, ss, sh]` (d contiguous) as the
    /// 4D map `{d, h, s, b}`, with boxes of `box_rows` sequence positions by `box_cols` (at
    /// most 64: one 128-byte swizzled row) of one head and batch, the 128-byte swizzle.
    pub fn bhsd(
        dtype: DType,
        [b, s, h, d]: [usize; 4],
        [sb, ss, sh]: [usize; 3],
        box_rows: u32,
        box_cols: u32,
    ) -> Self {
        let e = dtype.size() as u64;
        TensorMapLayout {
            dtype,
            dims: vec![d as u64, h as u64, s as u64, b as u64],
            strides: vec![sh as u64 * e, ss as u64 * e, sb as u64 * e],
            box_dims: vec![box_cols, 1, box_rows, 1],
            swizzle: TmaSwizzle::B128,
        }
    }

    /// Bytes one box copies (what its mbarrier's `expect_tx` announces, out-of-bounds
    /// parts included).
    pub fn box_bytes(&self) -> u64 {
        let n: u64 = self.box_dims.iter().map(|&x| u64::from(x)).product();
        n * u64::from(self.dtype.size())
    }

    /// Checks the layout and the tensor's device address against the driver's limits.
    pub fn check(&self, addr: u64) -> Result<()> {
        let bad = |why: String| Err(FlashError::TensorMap(why));
        let rank = self.dims.len();
        if !(1..=5).contains(&rank) {
            return bad(format!("{rank} dimensions (1 to 5)"));
        }
        if self.strides.len() + 1 != rank || self.box_dims.len() != rank {
            return bad(format!(
                "{rank} dimensions need {} strides and {rank} box extents, got {} and {}",
                rank - 1,
                self.strides.len(),
                self.box_dims.len()
            ));
        }
        if addr % 16 != 0 {
            return bad(format!("base address {addr:#x} is not 16-byte aligned"));
        }
        if let Some(i) = self.dims.iter().position(|&n| n == 0 || n > 1 << 32) {
            return bad(format!(
                "dimension {i} has {} elements (1 to 2^32)",
                self.dims[i]
            ));
        }
        if let Some(i) = self
            .strides
            .iter()
            .position(|&st| st == 0 || st % 16 != 0 || st >= 1 << 40)
        {
            return bad(format!(
                "the stride of dimension {} is {} bytes (a non-zero multiple of 16 below 2^40)",
                i + 1,
                self.strides[i]
            ));
        }
        if let Some(i) = self.box_dims.iter().position(|&n| n == 0 || n > 256) {
            return bad(format!("box extent {i} is {} (1 to 256)", self.box_dims[i]));
        }
        let row = u64::from(self.box_dims[0]) * u64::from(self.dtype.size());
        if row % 16 != 0 {
            return bad(format!(
                "the box's inner row is {row} bytes (a multiple of 16)"
            ));
        }
        if let Some(span) = self.swizzle.span().filter(|&s| row > s) {
            return bad(format!(
                "the box's inner row is {row} bytes, wider than the {span}-byte swizzle"
            ));
        }
        Ok(())
    }
}

/// An encoded tensor map: 128 opaque bytes, 64-byte aligned, passed to a kernel by value.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap([u64; 16]);

// SAFETY: a plain 128-byte value with no pointers the host owns (the tensor's device
// address inside is the caller's to keep alive while kernels use the map); the driver
// copies its bytes into the kernel's parameter space.
unsafe impl DeviceRepr for TensorMap {}

/// `cuTensorMapEncodeTiled`'s signature (enums as their 32-bit values).
type EncodeTiled = unsafe extern "C" fn(
    *mut TensorMap,
    u32,
    u32,
    *mut c_void,
    *const u64,
    *const u64,
    *const u32,
    *const u32,
    u32,
    u32,
    u32,
    u32,
) -> u32;

/// The driver library and its encoder, looked up once.
fn encoder() -> Option<&'static libloading::Symbol<'static, EncodeTiled>> {
    static LIB: OnceLock<Option<libloading::Library>> = OnceLock::new();
    static SYM: OnceLock<Option<libloading::Symbol<'static, EncodeTiled>>> = OnceLock::new();
    SYM.get_or_init(|| {
        // SAFETY: the driver library is the one cudarc loads (or the process links); opening
        // it again runs no initialiser twice. The symbol's type is the driver API's
        // prototype of cuTensorMapEncodeTiled (cuda.h, CUDA 12.0+), enums being 32-bit.
        let lib = LIB.get_or_init(|| {
            DRIVER_LIBRARIES
                .iter()
                .find_map(|n| unsafe { libloading::Library::new(*n) }.ok())
        });
        lib.as_ref()
            .and_then(|l| unsafe { l.get::<EncodeTiled>(b"cuTensorMapEncodeTiled\0") }.ok())
    })
    .as_ref()
}

/// Whether the driver has the tensor-map encoder (CUDA 12.0, driver r525, or newer).
pub(crate) fn encoder_present() -> bool {
    encoder().is_some()
}

impl TensorMap {
    /// Encodes the map of the tensor at device address `addr` (checked first).
    pub fn encode(layout: &TensorMapLayout, addr: u64) -> Result<TensorMap> {
        layout.check(addr)?;
        let f = encoder().ok_or_else(|| {
            FlashError::TensorMap(
                "this CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12.0, driver r525, \
                 or newer)"
                    .into(),
            )
        })?;
        let rank = layout.dims.len();
        let ones = [1u32; 5];
        let mut map = TensorMap([0; 16]);
        // SAFETY: every array holds `rank` (strides: rank - 1) elements, as the prototype
        // reads; `map` is 128 bytes, 64-byte aligned; the driver only writes `map`.
        let rc = unsafe {
            f(
                &mut map,
                dtype_code(layout.dtype),
                rank as u32,
                addr as *mut c_void,
                layout.dims.as_ptr(),
                layout.strides.as_ptr(),
                layout.box_dims.as_ptr(),
                ones.as_ptr(),
                0,
                layout.swizzle.code(),
                2,
                0,
            )
        };
        match rc {
            0 => Ok(map),
            code => Err(FlashError::TensorMap(format!(
                "cuTensorMapEncodeTiled returned CUresult {code} for {layout:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q128() -> TensorMapLayout {
        // [b 2, s 1000, h 8, d 128], contiguous: strides sb = s h d, ss = h d, sh = d.
        TensorMapLayout::bhsd(
            DType::Bf16,
            [2, 1000, 8, 128],
            [1000 * 8 * 128, 8 * 128, 128],
            128,
            64,
        )
    }

    #[test]
    fn the_map_is_128_bytes_aligned_to_64() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
    }

    #[test]
    fn bhsd_is_the_4d_map_of_the_reference() {
        let l = q128();
        assert_eq!(l.dims, [128, 8, 1000, 2]);
        assert_eq!(l.strides, [256, 2048, 2048 * 1000]);
        assert_eq!(l.box_dims, [64, 1, 128, 1]);
        assert_eq!(l.box_bytes(), 64 * 128 * 2);
        l.check(0x7f00_0000_0000)
            .expect("a contiguous bf16 tensor maps");
    }

    #[test]
    fn every_driver_limit_is_a_typed_error() {
        let cases: Vec<(TensorMapLayout, u64, &str)> = vec![
            (q128(), 0x7f00_0000_0008, "not 16-byte aligned"),
            (
                TensorMapLayout {
                    strides: vec![256, 2050, 4096000],
                    ..q128()
                },
                0,
                "stride of dimension 2 is 2050",
            ),
            (
                TensorMapLayout {
                    strides: vec![0, 2048, 4096000],
                    ..q128()
                },
                0,
                "stride of dimension 1 is 0",
            ),
            (
                TensorMapLayout {
                    box_dims: vec![128, 1, 128, 1],
                    ..q128()
                },
                0,
                "wider than the 128-byte swizzle",
            ),
            (
                TensorMapLayout {
                    box_dims: vec![64, 1, 512, 1],
                    ..q128()
                },
                0,
                "box extent 2 is 512",
            ),
            (
                TensorMapLayout {
                    box_dims: vec![4, 1, 128, 1],
                    ..q128()
                },
                0,
                "inner row is 8 bytes",
            ),
            (
                TensorMapLayout {
                    dims: vec![128, 8, 0, 2],
                    ..q128()
                },
                0,
                "dimension 2 has 0 elements",
            ),
            (
                TensorMapLayout {
                    strides: vec![256, 2048],
                    ..q128()
                },
                0,
                "need 3 strides",
            ),
            (
                TensorMapLayout {
                    dims: vec![1; 6],
                    strides: vec![16; 5],
                    box_dims: vec![1; 6],
                    ..q128()
                },
                0,
                "6 dimensions",
            ),
        ];
        for (layout, addr, want) in cases {
            match layout.check(addr) {
                Err(FlashError::TensorMap(why)) => assert!(why.contains(want), "{why} / {want}"),
                other => panic!("{layout:?}: expected a TensorMap error ({want}), got {other:?}"),
            }
        }
    }
}
