//! Manifest layer: the tensor maps of an sm_90a kernel, as the arguments of the driver's
//! `cuTensorMapEncodeTiled` (cuda.h, CUDA 12.0+):
//!
//! ```text
//! CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType dtype,
//!     cuuint32_t rank, void* globalAddress, const cuuint64_t* globalDim,
//!     const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
//!     const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
//!     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
//!     CUtensorMapFloatOOBfill oobFill);
//! ```
//!
//! The values are those flash-runtime passes (`tensor_map.rs`: `TensorMapLayout::bhsd`,
//! `TensorMap::encode`): a `[b, s, h, d]` tensor as the 4D map `{d, h, s, b}` (innermost
//! first), boxes of `{64, 1, rows, 1}`, the 128-byte swizzle; the enums by their cuda.h
//! names and values.

use serde::{Deserialize, Serialize};

use crate::kernels::sm90::fwd;
use crate::spec::DType;
use crate::tile::smem::ROW_BYTES;

/// The encoder the descriptions are the arguments of.
pub const ENCODER: &str = "cuTensorMapEncodeTiled";

/// The driver's limits every map here must meet: the global address's alignment, and
/// each global stride a non-zero multiple of [`STRIDE_MULTIPLE`] bytes below
/// [`STRIDE_LIMIT`].
pub const ADDRESS_ALIGN: u32 = 16;
/// See [`ADDRESS_ALIGN`].
pub const STRIDE_MULTIPLE: u32 = 16;
/// See [`ADDRESS_ALIGN`] (2^40 bytes, exclusive).
pub const STRIDE_LIMIT: u64 = 1 << 40;

/// `CUtensorMapInterleave`: none.
pub const INTERLEAVE_NONE: (&str, u32) = ("CU_TENSOR_MAP_INTERLEAVE_NONE", 0);
/// `CUtensorMapSwizzle`: 128 bytes (what `wgmma` reads).
pub const SWIZZLE_128B: (&str, u32) = ("CU_TENSOR_MAP_SWIZZLE_128B", 3);
/// `CUtensorMapL2promotion`: 128 bytes.
pub const L2_PROMOTION_128B: (&str, u32) = ("CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 2);
/// `CUtensorMapFloatOOBfill`: none (elements outside the tensor read as zeros).
pub const OOB_FILL_NONE: (&str, u32) = ("CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", 0);

/// The `CUtensorMapDataType` of an element type.
pub const fn data_type(t: DType) -> (&'static str, u32) {
    match t {
        DType::F16 => ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 6),
        DType::Bf16 => ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 9),
    }
}

/// A value of a CUDA driver API enum: its name in cuda.h and its number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enumerant {
    /// The cuda.h name, e.g. `CU_TENSOR_MAP_SWIZZLE_128B`.
    pub name: String,
    /// Its value (a 32-bit enum).
    pub value: u32,
}

impl From<(&str, u32)> for Enumerant {
    fn from((name, value): (&str, u32)) -> Self {
        Enumerant {
            name: name.to_string(),
            value,
        }
    }
}

/// How to encode one tensor-map parameter: `cuTensorMapEncodeTiled`'s arguments. The
/// formulas name the call's sizes (`batch`, `seqlen_q`, `seqlen_k`, `heads`, `heads_k`,
/// `head_dim`) and the tensor's strides in elements as the sm_80 kernels' parameters
/// name them (`q_batch_stride`, `q_row_stride`, `q_head_stride`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapInfo {
    /// The parameter it is passed as (`tm_q`, `tm_k`, `tm_v`; `tm_o`).
    pub param: String,
    /// The tensor it describes (`q`, `k`, `v`; shapes in `notes.tensors`); its device
    /// pointer (element `[0, 0, 0, 0]`) is `globalAddress`.
    pub tensor: String,
    /// The driver function that encodes it ([`ENCODER`]).
    pub encode: String,
    /// `tensorDataType`.
    pub data_type: Enumerant,
    /// `tensorRank`.
    pub rank: u32,
    /// `globalDim`: extents, innermost first, as formulas.
    pub global_dim: Vec<String>,
    /// `globalStrides`: byte strides of dims 1 to rank - 1, as formulas.
    pub global_strides: Vec<String>,
    /// `boxDim`: the box one copy moves, innermost first.
    pub box_dim: Vec<u32>,
    /// `elementStrides`.
    pub element_strides: Vec<u32>,
    /// `interleave`.
    pub interleave: Enumerant,
    /// `swizzle`.
    pub swizzle: Enumerant,
    /// `l2Promotion`.
    pub l2_promotion: Enumerant,
    /// `oobFill`.
    pub oob_fill: Enumerant,
    /// `globalAddress` must be a multiple of this ([`ADDRESS_ALIGN`]).
    pub global_address_align: u32,
    /// Each `globalStrides` value must be a non-zero multiple of this
    /// ([`STRIDE_MULTIPLE`])...
    pub global_strides_multiple: u32,
    /// ... below this ([`STRIDE_LIMIT`]).
    pub global_strides_below: u64,
}

/// The maps of variant `var`, in parameter order ([`fwd::Variant::maps`]): q with boxes
/// of `block_m` rows, k and v of [`fwd::BLOCK_N`], and for the TMA epilogue o of
/// [`fwd::O_BOX_ROWS`].
pub fn tensor_maps(var: &fwd::Variant) -> Vec<TensorMapInfo> {
    let q = ("q", "seqlen_q", "heads", var.block_m());
    let k = ("k", "seqlen_k", "heads_k", fwd::BLOCK_N);
    let v = ("v", "seqlen_k", "heads_k", fwd::BLOCK_N);
    let o = ("o", "seqlen_q", "heads", fwd::O_BOX_ROWS);
    var.maps()
        .iter()
        .zip([q, k, v, o])
        .map(|(param, t)| bhsd(param, var.dtype, t))
        .collect()
}

/// The map of the `[batch, seq, heads, head_dim]` tensor `name`, `{d, h, s, b}`, boxes of
/// one 128-byte swizzled row (64 elements) by `rows` positions of one head and batch.
fn bhsd(
    param: &str,
    dtype: DType,
    (name, seq, heads, rows): (&str, &str, &str, u32),
) -> TensorMapInfo {
    let e = dtype.size();
    let stride = |dim: &str| format!("{e} * {name}_{dim}_stride");
    TensorMapInfo {
        param: param.to_string(),
        tensor: name.to_string(),
        encode: ENCODER.to_string(),
        data_type: data_type(dtype).into(),
        rank: 4,
        global_dim: ["head_dim", heads, seq, "batch"]
            .map(str::to_string)
            .to_vec(),
        global_strides: vec![stride("head"), stride("row"), stride("batch")],
        box_dim: vec![ROW_BYTES / e, 1, rows, 1],
        element_strides: vec![1; 4],
        interleave: INTERLEAVE_NONE.into(),
        swizzle: SWIZZLE_128B.into(),
        l2_promotion: L2_PROMOTION_128B.into(),
        oob_fill: OOB_FILL_NONE.into(),
        global_address_align: ADDRESS_ALIGN,
        global_strides_multiple: STRIDE_MULTIPLE,
        global_strides_below: STRIDE_LIMIT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_q_map_of_d128_bf16() {
        let var = super::super::shipping()
            .into_iter()
            .find(|v| v.dtype == DType::Bf16 && v.head_dim == 128)
            .unwrap();
        let m = &tensor_maps(&var)[0];
        assert_eq!(
            (m.param.as_str(), m.tensor.as_str(), m.rank),
            ("tm_q", "q", 4)
        );
        assert_eq!(m.global_dim, ["head_dim", "heads", "seqlen_q", "batch"]);
        assert_eq!(
            m.global_strides,
            [
                "2 * q_head_stride",
                "2 * q_row_stride",
                "2 * q_batch_stride"
            ]
        );
        assert_eq!(m.box_dim, [64, 1, 128, 1]);
        assert_eq!(
            m.data_type,
            Enumerant::from(("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 9))
        );
        let k = &tensor_maps(&var)[1];
        assert_eq!(k.global_dim, ["head_dim", "heads_k", "seqlen_k", "batch"]);
        assert_eq!(k.global_strides[1], "2 * k_row_stride");
    }
}
