//! Kernel layer: the split-KV forward's combine step (every architecture), for
//! [`Pass::FwdCombine`](crate::spec::Pass::FwdCombine).
//!
//! One warp per output row (a packed row of [`crate::abi::decode`]): the row's LSE over
//! the splits, `lse = m + ln sum_s exp(lse_s - m)` with `m = max_s lse_s`, then
//! `o = sum_s exp(lse_s - lse) o_s` (each split's partial `o_s` is already normalised),
//! converted to the element type. Lane `l` owns the 4-float column chunks `l, l + 32, ..`
//! of the kernel's head dim. A split that saw no key of the row (`lse_s = -inf`) weighs
//! 0 and its partial is not read; a row no split saw gets `o = 0`, `lse = -inf`.

use super::half_fmt;
use super::params::Params;
use super::softmax::NEG_INF;
use crate::abi::{
    HEAD_DIM, HEADS, HEADS_PER_KV, LSE, LSE_ACCUM, NUM_SPLITS, O, O_ACCUM, SEQLEN_Q,
};
use crate::ptx::{
    Addr, B32, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Reg, Space, Special, Ty,
};
use crate::spec::{KernelPlan, Pass};

const LOG2_E: f32 = std::f32::consts::LOG2_E;

/// The entry of a [`Pass::FwdCombine`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass, Pass::FwdCombine);
    let d = spec.head_dim;
    let t = &plan.tiles;
    assert_eq!(t.block_m(), t.warps(), "generator bug: one row per warp");

    let mut b = Builder::new();
    b.comment(format!(
        "{}: o = sum_s exp(lse_s - lse) o_s, lse = log sum_s exp(lse_s)",
        spec.name()
    ));
    let p = Params::load(&mut b, spec.pass);
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let cta = b.special(Special::CtaIdX);
    let batch = b.special(Special::CtaIdY);
    let batches = b.special(Special::NCtaIdY);
    let (seqlen_q, heads) = (p.get(SEQLEN_Q), p.get(HEADS));
    let rows = b.mul_lo_u32(heads, seqlen_q);
    let row = b.mad_lo_u32(cta, t.block_m(), warp);
    let past = b.setp_u32(Cmp::Ge, row, rows);
    b.unless_uniform(past, |b| {
        let splits = p.get(NUM_SPLITS);
        // partial row (s, batch, row) = (s * batches + batch) * rows + row; between splits
        // `batches * rows` rows
        let first = b.mad_wide_u32(batch, rows, 0i64);
        let row64 = b.cvt_u64_u32(row);
        let first = b.add_s64(first, row64);
        let split_rows = b.mul_wide_u32(batches, rows);
        let lse_acc = b.cvta_global(p.get(LSE_ACCUM));
        let lse_at = |b: &mut Builder, s: Reg<B32>| -> Reg<F32> {
            let idx = b.cvt_u64_u32(s);
            let idx = b.mul_lo_u64(idx, split_rows);
            let idx = b.add_s64(idx, first);
            let off = b.shl_b64(idx, 2);
            let at = b.add_s64(lse_acc, off);
            let [v]: [Reg<F32>; 1] =
                b.ld(Space::Global, LdCache::Default, Ty::F32, Addr::Global(at, 0));
            v
        };

        b.comment("-- m = max_s lse_s (lanes stride the splits), then the sum --");
        let m = b.mov(NEG_INF);
        over_lane_splits(b, lane, splits, |b, s| {
            let v = lse_at(b, s);
            let mx = b.max_f32(m, v);
            b.assign(m, mx);
        });
        let m = warp_reduce(b, m, |b, x, y| b.max_f32(x, y));
        // (every split empty: m = -inf; exp2(-inf - 0) = 0 keeps the sum 0, not NaN)
        let none = b.setp_f32(Cmp::Eq, m, NEG_INF);
        let m_safe = b.selp_f32(0.0f32, m, none);
        let m_l2 = b.mul_f32(m_safe, LOG2_E);
        let neg_m = b.neg_f32(m_l2);
        let sum = b.mov(0.0f32);
        over_lane_splits(b, lane, splits, |b, s| {
            let v = lse_at(b, s);
            let e = b.fma_f32(v, LOG2_E, neg_m);
            let e = b.ex2(e);
            let acc = b.add_f32(sum, e);
            b.assign(sum, acc);
        });
        let sum = warp_reduce(b, sum, |b, x, y| b.add_f32(x, y));
        let empty = b.setp_f32(Cmp::Eq, sum, 0.0f32);
        let lg = b.lg2(sum);
        let l2 = b.add_f32(m_l2, lg); // lse * log2 e
        let lse = b.mul_f32(l2, std::f32::consts::LN_2);
        let lse = b.selp_f32(NEG_INF, lse, empty);
        // weights exp2(lse_s log2 e - l2); an empty row weighs every split 0
        let l2 = b.selp_f32(f32::INFINITY, l2, empty);
        let neg_l2 = b.neg_f32(l2);

        b.comment("-- o = sum_s w_s o_s; splits of weight 0 are not read --");
        let chunks = d.div_ceil(4 * 32) as usize;
        let col = b.shl_b32(lane, 2u32);
        let acc: Vec<[Reg<F32>; 4]> = (0..chunks)
            .map(|_| std::array::from_fn(|_| b.mov(0.0f32)))
            .collect();
        let in_kernel: Vec<_> = (0..chunks)
            .map(|c| {
                let c = b.add_u32(col, 128 * c as u32);
                b.setp_u32(Cmp::Lt, c, d)
            })
            .collect();
        let o_acc = b.cvta_global(p.get(O_ACCUM));
        let col_bytes = b.mul_wide_u32(col, 4u32);
        let s = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, s, splits);
        b.loop_exit_unless(&lp, more);
        let v = lse_at(b, s);
        let w = b.fma_f32(v, LOG2_E, neg_l2);
        let w = b.ex2(w);
        let zero_w = b.setp_f32(Cmp::Eq, w, 0.0f32);
        b.unless_uniform(zero_w, |b| {
            let idx = b.cvt_u64_u32(s);
            let idx = b.mul_lo_u64(idx, split_rows);
            let idx = b.add_s64(idx, first);
            let off = b.mul_lo_u64(idx, 4 * i64::from(d));
            let at = b.add_s64(o_acc, off);
            let at = b.add_s64(at, col_bytes);
            for (c, a) in acc.iter().enumerate() {
                b.when(in_kernel[c], false, |b| {
                    let x: [Reg<F32>; 4] = b.ld(
                        Space::Global,
                        LdCache::Default,
                        Ty::F32,
                        Addr::Global(at, 512 * c as i32),
                    );
                    for (r, xi) in a.iter().zip(x) {
                        let y = b.fma_f32(w, xi, *r);
                        b.assign(*r, y);
                    }
                });
            }
        });
        let s1 = b.add_u32(s, 1u32);
        b.assign(s, s1);
        b.loop_end(lp);

        b.comment("-- store o[batch, pos, head] and lse[batch, head, pos] --");
        let (pos, head) = output_coords(b, &p, row);
        let zero = b.mov(0u32);
        let o_row = p.tensor(b, &O, batch, pos, head);
        let o_col = b.mul_wide_u32(col, 2u32);
        let o_at = b.add_s64(o_row, o_col);
        let head_dim = p.get(HEAD_DIM);
        let fmt = half_fmt(spec.dtype);
        for (c, a) in acc.iter().enumerate() {
            let cc = b.add_u32(col, 128 * c as u32);
            let in_problem = b.setp_u32(Cmp::Lt, cc, head_dim);
            let words = [b.pack(fmt, a[0], a[1]), b.pack(fmt, a[2], a[3])];
            b.when(in_problem, false, |b| {
                let at = Addr::Global(o_at, 256 * c as i32);
                b.st(Space::Global, Ty::B32, at, &words)
            });
        }
        let lse_ptr = p.get(LSE);
        let on = b.setp_u64(Cmp::Ne, lse_ptr, 0i64);
        let lane0 = b.setp_u32(Cmp::Eq, lane, zero);
        let on = b.and_pred(on, lane0);
        let bh = b.mad_lo_u32(batch, heads, head);
        let idx = b.mad_wide_u32(bh, seqlen_q, 0i64);
        let pos64 = b.cvt_u64_u32(pos);
        let idx = b.add_s64(idx, pos64);
        let off = b.shl_b64(idx, 2);
        let base = b.cvta_global(lse_ptr);
        let at = b.add_s64(base, off);
        b.when(on, false, |b| {
            b.st(Space::Global, Ty::F32, Addr::Global(at, 0), &[lse])
        });
    });
    let bounds = LaunchBounds {
        max_threads: Some(t.threads()),
        min_ctas_per_sm: None,
    };
    b.finish(spec.name(), p.entry(), bounds)
}

/// Runs `body(b, s)` for splits `s = lane, lane + 32, ..` below `splits` (a loop the
/// lanes leave at different iterations).
fn over_lane_splits(
    b: &mut Builder,
    lane: Reg<B32>,
    splits: Reg<B32>,
    mut body: impl FnMut(&mut Builder, Reg<B32>),
) {
    let s = b.mov(lane);
    let lp = b.loop_start_divergent();
    let more = b.setp_u32(Cmp::Lt, s, splits);
    b.loop_exit_unless(&lp, more);
    body(b, s);
    let next = b.add_u32(s, 32u32);
    b.assign(s, next);
    b.loop_end(lp);
}

/// `x` reduced over the warp with `op` (butterfly shuffles: every lane gets the result).
fn warp_reduce(
    b: &mut Builder,
    mut x: Reg<F32>,
    op: impl Fn(&mut Builder, Reg<F32>, Reg<F32>) -> Reg<F32>,
) -> Reg<F32> {
    for lanes in [16, 8, 4, 2, 1] {
        let other = b.shfl_bfly_f32(x, lanes);
        x = op(b, x, other);
    }
    x
}

/// (query position, query head) of a batch's packed row `row` ([`crate::abi::decode`]):
/// KV head `row / (heads_per_kv seqlen_q)`, then position and head in the group.
fn output_coords(b: &mut Builder, p: &Params, row: Reg<B32>) -> (Reg<B32>, Reg<B32>) {
    let hpk = p.get(HEADS_PER_KV);
    let group = b.mul_lo_u32(hpk, p.get(SEQLEN_Q));
    let kv_head = b.div_u32(row, group);
    let in_group = b.rem_u32(row, group);
    let pos = b.div_u32(in_group, hpk);
    let g = b.rem_u32(in_group, hpk);
    let head = b.mad_lo_u32(kv_head, hpk, g);
    (pos, head)
}
