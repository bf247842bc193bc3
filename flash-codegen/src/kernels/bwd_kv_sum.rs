//! Kernel layer: the grouped-query backward's last step ([`Pass::BwdKvSum`]).
//!
//! When the main pass splits a group's query heads over `1 << group_split_shift` CTAs per (key
//! block, kv head), each split writes its dK (already scaled) and dV as f32 partials,
//! `[split, (dK, dV), batch, seqlen_k, heads_k, head_dim]` contiguous. Here
//! `dK = sum_s dK_s` and `dV = sum_s dV_s`, added in split order from zero (so the
//! deterministic mode stays bitwise reproducible), converted to the element type.
//! One warp per key row, lane `l` owns elements `8l..8l+8`; `block_m / warps` rows per
//! warp. Grid: `[ceil(seqlen_k / block_m), heads_k, batch]`.

use super::half_fmt;
use super::params::Params;
use crate::abi::{DK, DKV_PARTIAL, DV, GROUP_SPLIT_SHIFT, HEAD_DIM, SEQLEN_K};
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Reg, Space, Special, Ty,
};
use crate::spec::{KernelPlan, Pass};

/// The entry of a [`Pass::BwdKvSum`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass, Pass::BwdKvSum);
    let (fmt, t) = (half_fmt(spec.dtype), &plan.tiles);
    let mut b = Builder::new();
    b.comment(format!(
        "{}: dK, dV = sums of the group splits' f32 partials",
        spec.name()
    ));
    let p = Params::load(&mut b, spec.pass);
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let n_block = b.special(Special::CtaIdX);
    let kv_head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let heads_k = b.special(Special::NCtaIdY);
    let batches = b.special(Special::NCtaIdZ);
    let (seqlen_k, head_dim) = (p.get(SEQLEN_K), p.get(HEAD_DIM));
    // (the main pass's clamp: at most 16)
    let shift = b.min_u32(p.get(GROUP_SPLIT_SHIFT), 16u32);
    let one = b.mov(1u32);
    let splits = b.shl_b32(one, shift);
    let n0 = b.mul_lo_u32(n_block, t.block_m());
    let rows_left = b.sub_u32(seqlen_k, n0);
    let col = b.shl_b32(lane, 3u32);
    let col_past = b.setp_u32(Cmp::Ge, col, head_dim);

    b.comment("-- partials: one tensor of batch * seqlen_k * heads_k * head_dim f32 --");
    let row_floats = b.mul_lo_u32(heads_k, head_dim);
    let rows = b.mul_wide_u32(batches, seqlen_k);
    let row_floats64 = b.cvt_u64_u32(row_floats);
    let tensor_floats = b.mul_lo_u64(rows, row_floats64);
    let tensor_bytes = b.shl_b64(tensor_floats, 2);
    let split_bytes = b.add_s64(tensor_bytes, tensor_bytes);
    // element (batch, n0, kv_head, col) of split 0's dK
    let first_row = b.mad_lo_u32(batch, seqlen_k, n0);
    let at = b.mul_wide_u32(first_row, row_floats);
    let head_col = b.mad_lo_u32(kv_head, head_dim, col);
    let head_col = b.cvt_u64_u32(head_col);
    let at = b.add_s64(at, head_col);
    let at = b.shl_b64(at, 2);
    let partial = b.cvta_global(p.get(DKV_PARTIAL));
    let partial = b.add_s64(partial, at);
    let row_bytes = b.shl_b32(row_floats, 2u32);
    let lane16 = b.mul_wide_u32(lane, 16u32);
    let dk_base = p.tensor(&mut b, &DK, batch, n0, kv_head);
    let dv_base = p.tensor(&mut b, &DV, batch, n0, kv_head);
    let dk_rb = b.shl_b32(p.row_stride(&DK), 1u32);
    let dv_rb = b.shl_b32(p.row_stride(&DV), 1u32);

    for i in 0..t.block_m() / t.warps() {
        let row = b.add_u32(warp, i * t.warps());
        let past = b.setp_u32(Cmp::Ge, row, rows_left);
        b.unless_uniform(past, |b| {
            b.unless(col_past, |b| {
                let from = b.mad_wide_u32(row, row_bytes, partial);
                let sums = sum_splits(b, from, tensor_bytes, split_bytes, splits);
                for ((base, rb), acc) in [(dk_base, dk_rb), (dv_base, dv_rb)].iter().zip(&sums) {
                    let to = b.mad_wide_u32(row, *rb, lane16);
                    let to = b.add_s64(*base, to);
                    let words: Vec<Reg<B32>> = acc
                        .chunks(2)
                        .map(|pair| b.pack(fmt, pair[0], pair[1]))
                        .collect();
                    b.st(Space::Global, Ty::B32, Addr::Global(to, 0), &words);
                }
            });
        });
    }
    let bounds = LaunchBounds {
        max_threads: Some(t.threads()),
        min_ctas_per_sm: None,
        exact_threads: false,
    };
    b.finish(spec.name(), p.entry(), bounds)
}

/// The lane's 8 columns of dK and of dV summed over the splits, in split order from
/// zero: dK of split s at `from + s * split_bytes`, its dV `tensor_bytes` further.
fn sum_splits(
    b: &mut Builder,
    from: Reg<B64>,
    tensor_bytes: Reg<B64>,
    split_bytes: Reg<B64>,
    splits: Reg<B32>,
) -> [[Reg<F32>; 8]; 2] {
    let sums: [[Reg<F32>; 8]; 2] = std::array::from_fn(|_| std::array::from_fn(|_| b.mov(0.0f32)));
    let (at, s) = (b.mov(from), b.mov(0u32));
    // (lanes past the head dim skip the loop: divergent)
    let lp = b.loop_start_divergent();
    let more = b.setp_u32(Cmp::Lt, s, splits);
    b.loop_exit_unless(&lp, more);
    for (which, acc) in sums.iter().enumerate() {
        let src = match which {
            0 => at,
            _ => b.add_s64(at, tensor_bytes),
        };
        for half in 0..2 {
            let x: [Reg<F32>; 4] = b.ld(
                Space::Global,
                LdCache::Default,
                Ty::F32,
                Addr::Global(src, 16 * half),
            );
            for (k, v) in x.into_iter().enumerate() {
                let a = acc[4 * half as usize + k];
                let sum = b.add_f32(a, v);
                b.assign(a, sum);
            }
        }
    }
    let next = b.add_s64(at, split_bytes);
    b.assign(at, next);
    let ns = b.add_u32(s, 1u32);
    b.assign(s, ns);
    b.loop_end(lp);
    sums
}
