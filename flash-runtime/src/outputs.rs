//! Runtime API layer: what the allocating calls return: [`Forward`] (o and lse) and
//! [`Gradients`] (dq, dk, dv), each with views for the next call.

use cudarc::driver::{CudaSlice, CudaView};

use crate::tensor::{Tensor4, contiguous_strides};

/// The outputs of [`crate::FlashAttention::forward`]: `o` (contiguous, shaped like q:
/// `[batch, seqlen_q, heads, head_dim]`) and `lse` (f32 `[batch, heads, seqlen_q]`, natural
/// log), the two things the backward needs besides the inputs. (A problem with no elements
/// still gets one-element buffers: the driver allocates no empty buffer; the views cover
/// the shape.)
#[non_exhaustive]
#[derive(Debug)]
pub struct Forward<T> {
    /// The attention output, contiguous `[batch, seqlen_q, heads, head_dim]`.
    pub o: CudaSlice<T>,
    /// The row log-sum-exp, f32 `[batch, heads, seqlen_q]`.
    pub lse: CudaSlice<f32>,
    /// q's shape, which `o` has.
    pub shape: [usize; 4],
}

impl<T> Forward<T> {
    /// `o` as a tensor view.
    pub fn o(&self) -> Tensor4<'_, T> {
        Tensor4::strided(&self.o, self.shape, contiguous_strides(self.shape))
    }

    /// `lse` as a view.
    pub fn lse(&self) -> CudaView<'_, f32> {
        self.lse.as_view()
    }
}

/// The outputs of [`crate::FlashAttention::backward`]: `dq` (shaped like q), `dk` and `dv`
/// (shaped like k and v), contiguous (one-element buffers where a shape has no
/// elements, as in [`Forward`]).
#[non_exhaustive]
#[derive(Debug)]
pub struct Gradients<T> {
    /// dL/dq, contiguous `[batch, seqlen_q, heads, head_dim]`.
    pub dq: CudaSlice<T>,
    /// dL/dk, contiguous `[batch, seqlen_k, heads_k, head_dim]`.
    pub dk: CudaSlice<T>,
    /// dL/dv, contiguous like `dk`.
    pub dv: CudaSlice<T>,
    /// q's shape.
    pub q_shape: [usize; 4],
    /// k's (and v's) shape.
    pub kv_shape: [usize; 4],
}

impl<T> Gradients<T> {
    /// `dq` as a tensor view.
    pub fn dq(&self) -> Tensor4<'_, T> {
        Tensor4::strided(&self.dq, self.q_shape, contiguous_strides(self.q_shape))
    }
    /// `dk` as a tensor view.
    pub fn dk(&self) -> Tensor4<'_, T> {
        Tensor4::strided(&self.dk, self.kv_shape, contiguous_strides(self.kv_shape))
    }
    /// `dv` as a tensor view.
    pub fn dv(&self) -> Tensor4<'_, T> {
        Tensor4::strided(&self.dv, self.kv_shape, contiguous_strides(self.kv_shape))
    }
}
