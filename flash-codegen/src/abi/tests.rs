//! ABI layer tests: every table row comes from a handle of the right type, and a tensor
//! map parameter reaches the printer as an aligned byte array.

use super::*;
use crate::ptx::{Builder, LaunchBounds, Ty, print};

/// Every handle: each scalar's, then each tensor's four.
fn handles() -> Vec<(&'static str, AbiTy)> {
    let b64 = [
        LSE,
        DVEC,
        DQ_ACCUM,
        O_ACCUM,
        LSE_ACCUM,
        SEQLENS_K,
        BLOCK_TABLE,
        CU_SEQLENS_Q,
        CU_SEQLENS_K,
        DKV_PARTIAL,
    ];
    let b64 = b64.map(|a| (a.name(), a.ty()));
    let b32 = [
        SEQLEN_Q,
        SEQLEN_K,
        HEAD_DIM,
        HEADS,
        HEADS_PER_KV,
        NUM_SPLITS,
        MAX_PAGES,
        PAGE_SHIFT,
        NUM_PAGES,
        TOTAL_Q,
        TOTAL_K,
        GROUP_SPLIT_SHIFT,
    ];
    let b32 = b32.map(|a| (a.name(), a.ty()));
    let f32 = [SCALE_LOG2, SOFTMAX_SCALE].map(|a| (a.name(), a.ty()));
    let mut all: Vec<_> = b64.into_iter().chain(b32).chain(f32).collect();
    for t in TENSORS {
        all.push((t.ptr.name(), t.ptr.ty()));
        all.push((t.batch_stride.name(), t.batch_stride.ty()));
        all.push((t.row_stride.name(), t.row_stride.ty()));
        all.push((t.head_stride.name(), t.head_stride.ty()));
    }
    all
}

/// Each row of every pass names a handle with the handle's type, once; every handle is
/// a parameter of some pass; no two handles share a name.
#[test]
fn every_row_is_a_handle_of_its_type() {
    let all = handles();
    for (i, (n, _)) in all.iter().enumerate() {
        assert!(
            !all[..i].iter().any(|(m, _)| m == n),
            "two handles named {n}"
        );
    }
    for pass in Pass::ALL {
        let rows = params(pass);
        for (i, d) in rows.iter().enumerate() {
            let h = all.iter().find(|(n, _)| *n == d.name);
            assert_eq!(h, Some(&(d.name, d.ty)), "{} {}", pass.name(), d.name);
            assert!(
                !rows[..i].iter().any(|e| e.name == d.name),
                "{} {}",
                pass.name(),
                d.name
            );
        }
    }
    for (n, _) in &all {
        assert!(
            Pass::ALL
                .iter()
                .any(|&p| params(p).iter().any(|d| d.name == *n)),
            "handle {n} is no pass's parameter"
        );
    }
}

/// The handles' kinds and types agree: pointers and `u64` load into `b64`, `u32` into
/// `b32`, `f32` into `f32`; a tensor's strides are named after it.
#[test]
fn handles_fit_their_register_class() {
    for (n, ty) in handles() {
        let want = match ty {
            AbiTy::Ptr | AbiTy::U64 => Ty::U64,
            AbiTy::U32 => Ty::U32,
            AbiTy::F32 => Ty::F32,
            AbiTy::TensorMap => panic!("{n}: no handle is a tensor map yet"),
        };
        assert_eq!(ty.scalar(), Some(want), "{n}");
    }
    for t in TENSORS {
        let n = t.name();
        assert_eq!(t.ptr.ty(), AbiTy::Ptr, "{n}");
        assert_eq!(t.batch_stride.name(), format!("{n}_batch_stride"));
        assert_eq!(t.row_stride.name(), format!("{n}_row_stride"));
        assert_eq!(t.head_stride.name(), format!("{n}_head_stride"));
    }
}

/// Each type's PTX declaration, manifest name, numpy dtype and size.
#[test]
fn types_name_and_size() {
    let rows = AbiTy::ALL.map(|t| (t.param_ty(), t.name(), t.numpy(), t.size()));
    let s = ParamTy::Scalar;
    assert_eq!(
        rows,
        [
            (s(Ty::U64), "u64", "uint64", 8),
            (s(Ty::U64), "u64", "uint64", 8),
            (s(Ty::U32), "u32", "uint32", 4),
            (s(Ty::F32), "f32", "float32", 4),
            (
                ParamTy::Bytes {
                    align: 64,
                    size: 128
                },
                "b8[128]",
                "V128",
                128
            ),
        ]
    );
    assert_eq!(AbiTy::TensorMap.scalar(), None);
    assert_eq!(AbiTy::Ptr.to_string(), "u64");
    assert_eq!(serde_json::to_string(&AbiTy::U32).unwrap(), r#""u32""#);
}

/// A tensor map parameter is declared `.param .align 64 .b8 NAME[128]` next to the
/// scalars, in order.
#[test]
fn a_tensor_map_prints_as_an_aligned_byte_array() {
    let descs = [
        Q.ptr.desc("q"),
        ParamDesc::new("tmap_q", AbiTy::TensorMap, "the tensor map of q"),
        SEQLEN_Q.desc("query sequence length"),
    ];
    let ir = ir_params_of(&descs);
    assert_eq!(
        ir[1].ty,
        ParamTy::Bytes {
            align: 64,
            size: 128
        }
    );
    let entry = Builder::new().finish("tm", ir, LaunchBounds::default());
    let mut s = String::new();
    print::write_entry(&mut s, &entry).unwrap();
    assert!(
        s.contains(
            "    .param .u64 q,\n    .param .align 64 .b8 tmap_q[128],\n    .param .u32 seqlen_q\n)"
        ),
        "{s}"
    );
}
