//! Argument checks of the varlen (packed sequences) forward and backward, through the pure
//! validate layer (no GPU needed): the packed tensors' batch dim, the offsets' buffers,
//! the sequence count and the varlen scratch each give their typed `FlashError`; good
//! inputs plan the varlen kernels on the grid the ABI gives (the longest sequences, the
//! batch), with the offsets and totals as parameters, and the dense checks still apply.

use flash_codegen::abi::{grid, params, varlen::accum_rows};
use flash_codegen::{Arch, Pass, Tiling};
use flash_runtime::validate::{
    BufDesc, BwdArgs, FwdArgs, ParamValue, ScratchDesc, VarlenDesc, plan_bwd_varlen,
    plan_fwd_varlen, varlen_scratch,
};
use flash_runtime::{AttnParams, BwdOptions, FlashError};

const CUQ: u64 = 0xc000_0000;
const CUK: u64 = 0xd000_0000;
/// Compute capabilities: A100 (the standard rows), H100 (the wide ones where they exist).
const A100: (u32, u32) = (8, 0);
const H100: (u32, u32) = (9, 0);

mod validate_support;
use validate_support::{bwd_args, t};

/// `batch` sequences packed in `total_q` query and `total_k` key rows.
fn vl(batch: usize, max_q: usize, max_k: usize) -> VarlenDesc {
    VarlenDesc {
        cu_seqlens_q: BufDesc {
            ptr: CUQ,
            len: batch + 1,
        },
        cu_seqlens_k: BufDesc {
            ptr: CUK,
            len: batch + 1,
        },
        max_seqlen_q: max_q,
        max_seqlen_k: max_k,
    }
}

fn fwd(tq: usize, tk: usize, h: usize, hk: usize, d: usize) -> FwdArgs<'static> {
    FwdArgs {
        q: t([1, tq, h, d], 0x1000_0000),
        k: t([1, tk, hk, d], 0x2000_0000),
        v: t([1, tk, hk, d], 0x3000_0000),
        o: t([1, tq, h, d], 0x4000_0000),
        lse: Some(BufDesc {
            ptr: 0x5000_0000,
            len: h * tq,
        }),
        params: AttnParams::causal(),
        alibi: None,
    }
}

fn bwd(
    tq: usize,
    tk: usize,
    h: usize,
    hk: usize,
    d: usize,
    batch: usize,
    det: bool,
) -> BwdArgs<'static> {
    let (qs, ks) = ([1, tq, h, d], [1, tk, hk, d]);
    let need = varlen_scratch(qs, batch, det);
    let scratch = ScratchDesc {
        dvec: BufDesc {
            ptr: 0xa000_0000,
            len: need.dvec,
        },
        dq_accum: (!det).then_some(BufDesc {
            ptr: 0xb000_0000,
            len: need.dq_accum,
        }),
        dkv_partial: None,
    };
    let opts = match det {
        true => BwdOptions::deterministic(),
        false => BwdOptions::new(),
    };
    bwd_args(
        (qs, ks),
        h * tq,
        Some(scratch),
        (AttnParams::causal(), opts),
    )
}

fn msg(e: FlashError) -> String {
    e.to_string()
}

/// Good calls: the varlen kernels, their ABI's parameters in order, the offsets and
/// totals, the grid over the longest sequence and the batch.
#[test]
fn varlen_plans_follow_the_abi() {
    let p = plan_fwd_varlen(
        &fwd(1000, 1200, 32, 8, 128),
        &vl(5, 700, 900),
        Arch::Sm80,
        u64::MAX,
    )
    .unwrap();
    assert_eq!(p.spec.pass, Pass::FwdVarlen);
    let names: Vec<&str> = p.params.iter().map(|(n, _)| *n).collect();
    let want: Vec<&str> = params(Pass::FwdVarlen).iter().map(|d| d.name).collect();
    assert_eq!(names, want);
    assert_eq!(p.param("cu_seqlens_q"), Some(ParamValue::U64(CUQ)));
    assert_eq!(p.param("cu_seqlens_k"), Some(ParamValue::U64(CUK)));
    assert_eq!(p.param("total_q"), Some(ParamValue::U32(1000)));
    assert_eq!(p.param("total_k"), Some(ParamValue::U32(1200)));
    assert_eq!(p.grid, grid(&p.spec, 5, 700, 900, 32, 8).unwrap());
    for det in [false, true] {
        let a = bwd(1000, 1200, 32, 8, 128, 5, det);
        let b = plan_bwd_varlen(&a, &vl(5, 700, 900), Arch::Sm80, A100).unwrap();
        let passes: Vec<Pass> = b.launches.iter().map(|l| l.spec.pass).collect();
        let last = if det {
            Pass::BwdDqVarlen
        } else {
            Pass::BwdPostVarlen
        };
        assert_eq!(passes, [Pass::BwdPreVarlen, Pass::BwdVarlen, last]);
        for l in &b.launches {
            let names: Vec<&str> = l.params.iter().map(|(n, _)| *n).collect();
            let want: Vec<&str> = params(l.spec.pass).iter().map(|d| d.name).collect();
            assert_eq!(names, want, "{}", l.spec);
            assert_eq!(
                l.grid,
                grid(&l.spec, 5, 700, 900, 32, 8).unwrap(),
                "{}",
                l.spec
            );
        }
        let acc = b.launch(Pass::BwdPreVarlen).unwrap().param("dq_accum");
        assert_eq!(
            acc,
            Some(ParamValue::U64(if det { 0 } else { 0xb000_0000 }))
        );
        assert_eq!(
            b.scratch.dq_accum,
            if det {
                0
            } else {
                32 * accum_rows(1000, 5) * 128
            }
        );
    }
}

/// Packed tensors have a batch dim of 1.
#[test]
fn a_batched_tensor_is_refused() {
    let mut a = fwd(100, 100, 4, 4, 64);
    a.q = t([2, 50, 4, 64], 0x1000_0000);
    a.o = t([2, 50, 4, 64], 0x4000_0000);
    let e = msg(plan_fwd_varlen(&a, &vl(2, 50, 50), Arch::Sm80, u64::MAX).unwrap_err());
    assert!(e.contains("[1, total_q, heads, head_dim]"), "{e}");
}

/// The offsets: batch + 1 each, equal lengths, non-null and 4-byte aligned.
#[test]
fn bad_offsets_are_refused() {
    let a = fwd(100, 100, 4, 4, 64);
    let plan = |v: VarlenDesc| plan_fwd_varlen(&a, &v, Arch::Sm80, u64::MAX);
    let mut v = vl(3, 50, 50);
    v.cu_seqlens_k.len = 3;
    assert!(msg(plan(v).unwrap_err()).contains("batch + 1"));
    let mut v = vl(3, 50, 50);
    v.cu_seqlens_q.len = 0;
    v.cu_seqlens_k.len = 0;
    assert!(msg(plan(v).unwrap_err()).contains("batch + 1"));
    for (ptr, which) in [(0, "cu_seqlens_q"), (CUQ + 2, "cu_seqlens_q")] {
        let mut v = vl(3, 50, 50);
        v.cu_seqlens_q.ptr = ptr;
        let e = plan(v).unwrap_err();
        assert!(
            matches!(e, FlashError::Misaligned { tensor, .. } if tensor == which),
            "{e:?}"
        );
    }
    let mut v = vl(3, 50, 50);
    v.cu_seqlens_k.ptr = CUK + 1;
    let e = plan(v).unwrap_err();
    assert!(
        matches!(
            e,
            FlashError::Misaligned {
                tensor: "cu_seqlens_k",
                ..
            }
        ),
        "{e:?}"
    );
    let e = plan(vl(70_000, 50, 50)).unwrap_err();
    assert!(matches!(e, FlashError::GridTooLarge { .. }), "{e:?}");
    let e = plan(vl(3, 1 << 33, 50)).unwrap_err();
    assert!(msg(e).contains("max_seqlen_q"));
}

/// The dense checks still run on the packed tensors (a shape mismatch, a short lse).
#[test]
fn dense_checks_apply() {
    let mut a = fwd(100, 100, 4, 4, 64);
    a.o = t([1, 99, 4, 64], 0x4000_0000);
    assert!(plan_fwd_varlen(&a, &vl(2, 50, 50), Arch::Sm80, u64::MAX).is_err());
    let mut a = fwd(100, 100, 4, 4, 64);
    a.lse = Some(BufDesc {
        ptr: 0x5000_0000,
        len: 399,
    });
    let e = msg(plan_fwd_varlen(&a, &vl(2, 50, 50), Arch::Sm80, u64::MAX).unwrap_err());
    assert!(e.contains("lse"), "{e}");
}

/// The varlen dq accumulator is larger than the dense batch-1 one: a dense-sized
/// scratch is refused with the size it needs.
#[test]
fn a_dense_sized_accumulator_is_too_small() {
    let mut a = bwd(1000, 1000, 8, 8, 64, 9, false);
    let dense = 1000usize.div_ceil(16) * 16 * 8 * 64;
    a.scratch.as_mut().unwrap().dq_accum = Some(BufDesc {
        ptr: 0xb000_0000,
        len: dense,
    });
    let e = plan_bwd_varlen(&a, &vl(9, 200, 200), Arch::Sm80, A100).unwrap_err();
    let want = 8 * accum_rows(1000, 9) * 64;
    assert!(
        matches!(e, FlashError::ScratchTooSmall { buffer: "dq_accum", needed, .. } if needed == want),
        "{e:?}"
    );
}

/// Nothing to launch: no sequence, or the longest ones empty.
#[test]
fn empty_batches_launch_nothing() {
    let a = fwd(100, 100, 4, 4, 64);
    assert!(
        plan_fwd_varlen(&a, &vl(0, 50, 50), Arch::Sm80, u64::MAX)
            .unwrap()
            .is_noop()
    );
    assert!(
        plan_fwd_varlen(&a, &vl(3, 0, 50), Arch::Sm80, u64::MAX)
            .unwrap()
            .is_noop()
    );
    let b = plan_bwd_varlen(
        &bwd(100, 100, 4, 4, 64, 3, false),
        &vl(3, 0, 0),
        Arch::Sm80,
        A100,
    )
    .unwrap();
    assert!(b.launches.is_empty());
    // no keys anywhere (max_seqlen_k 0): the main pass is left out, dq still computed (0)
    let b = plan_bwd_varlen(
        &bwd(100, 100, 4, 4, 64, 3, false),
        &vl(3, 50, 0),
        Arch::Sm80,
        H100,
    )
    .unwrap();
    let passes: Vec<Pass> = b.launches.iter().map(|l| l.spec.pass).collect();
    assert_eq!(passes, [Pass::BwdPreVarlen, Pass::BwdPostVarlen]);
}

/// The main pass runs its wide row (the dense backward's tiles) from compute capability
/// 9.0 on, at the head dims that have one (d64, d96, d128), in both modes; its grid then
/// follows the wide row's key block. Below 9.0, and at other head dims, the standard row.
#[test]
fn varlen_bwd_runs_its_wide_row_from_compute_capability_9() {
    for d in [32, 64, 96, 128, 160, 256] {
        for cc in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)] {
            for det in [false, true] {
                let a = bwd(1000, 1200, 32, 8, d, 5, det);
                let b = plan_bwd_varlen(&a, &vl(5, 700, 900), Arch::Sm80, cc).unwrap();
                let main = b.launch(Pass::BwdVarlen).unwrap();
                let wide = cc >= (9, 0) && [64, 96, 128].contains(&d);
                let want = if wide { Tiling::Wide } else { Tiling::Standard };
                assert_eq!(main.spec.tiling, want, "d{d} cc {cc:?} det {det}");
                assert_eq!(main.grid, grid(&main.spec, 5, 700, 900, 32, 8).unwrap());
                for l in &b.launches {
                    if l.spec.pass != Pass::BwdVarlen {
                        assert_eq!(l.spec.tiling, Tiling::Standard, "{}", l.spec);
                    }
                }
            }
        }
    }
    // the wide d64 row is the dense one: 128 keys a CTA, where the standard one takes 64
    let a = bwd(1000, 1200, 32, 8, 64, 5, false);
    let block_n = |cc| {
        let b = plan_bwd_varlen(&a, &vl(5, 700, 900), Arch::Sm80, cc).unwrap();
        b.launch(Pass::BwdVarlen).unwrap().spec.tiles().block_n()
    };
    assert_eq!((block_n(A100), block_n(H100)), (64, 128));
}
