//! Kernel layer: the split-KV forward's combine step (every architecture), for
//! [`Pass::FwdCombine`].
//!
//! One CTA per output row (a packed row of [`crate::abi::decode`]). Every warp finds the
//! row's LSE over the splits, `lse = m + ln sum_s exp(lse_s - m)` with `m = max_s lse_s`
//! (each lane holds the lse of splits `lane, lane + 32, ..`: at most [`MAX_SPLITS`]).
//! Then the warps share the splits for `o = sum_s exp(lse_s - lse) o_s` (each split's
//! partial `o_s` is already normalised): warp `w` takes splits `w, w + warps, ..`, in runs
//! of `STEP` whose partial rows and lse values are loaded before their products, so that
//! `STEP x warps` splits are in flight at once (the first run's loads go out with the lse
//! loads, before the row's lse is reduced; every load is `ld.volatile` so that ptxas
//! keeps that order); lane `l` owns the 4-float column chunks `l, l + 32, ..` of the
//! kernel's head dim. The warps' sums meet
//! in shared memory, warp 0 adds them, converts and stores. A split that saw no key of the
//! row (`lse_s = -inf`, its partial 0) weighs 0; a row no split saw gets `o = 0`,
//! `lse = -inf`.

use super::half_fmt;
use super::params::{Params, row_stats_base};
use super::softmax::NEG_INF;
use crate::abi::decode::MAX_SPLITS;
use crate::abi::{HEAD_DIM, HEADS, HEADS_PER_KV, LSE, LSE_ACCUM, NUM_SPLITS, O, O_ACCUM, SEQLEN_Q};
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, LdCache, Pred, Reg, Space, Special, Ty,
};
use crate::spec::{KernelPlan, Pass};

const LOG2_E: f32 = std::f32::consts::LOG2_E;

/// Registers of lse values per lane: 32 lanes x `GROUPS` = [`MAX_SPLITS`].
const GROUPS: u32 = MAX_SPLITS / 32;

/// Splits a warp loads together before their products (8 x 4 warps = 32 in flight per
/// row: more per warp measured slower, see docs/performance.md).
const STEP: u32 = 8;

/// One split's loads: its lse and the lane's 4-float chunks of its partial row.
type Loaded = (Reg<F32>, Vec<[Reg<F32>; 4]>);

/// The entry of a [`Pass::FwdCombine`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass, Pass::FwdCombine);
    let (d, warps, block_rows) = (spec.head_dim, plan.tiles.warps(), plan.tiles.block_m());
    // one row per CTA (its warps share the splits) or one per warp (a warp takes them all)
    let per_warp = block_rows > 1;
    assert!(
        block_rows == 1 || block_rows == warps,
        "generator bug: one row per CTA or per warp"
    );
    let row_warps = warps / block_rows;
    let mut b = Builder::new();
    b.comment(format!(
        "{}: o = sum_s exp(lse_s - lse) o_s, lse = log sum_s exp(lse_s); {row_warps} warps a row",
        spec.name()
    ));
    let p = Params::load(&mut b, spec.pass);
    let tid = b.special(Special::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let cta = b.special(Special::CtaIdX);
    // the row, and the warp's place among the row's warps
    let (row, sub) = match per_warp {
        true => (b.mad_lo_u32(cta, block_rows, warp), b.mov(0u32)),
        false => (cta, warp),
    };
    let batch = b.special(Special::CtaIdY);
    let batches = b.special(Special::NCtaIdY);
    let (seqlen_q, heads, splits) = (p.get(SEQLEN_Q), p.get(HEADS), p.get(NUM_SPLITS));
    let rows = b.mul_lo_u32(heads, seqlen_q);
    let past = b.setp_u32(Cmp::Ge, row, rows);
    let body = |b: &mut Builder| {
        // partial row (s, batch, row) = (s * batches + batch) * rows + row
        let first = b.mad_wide_u32(batch, rows, 0i64);
        let row64 = b.cvt_u64_u32(row);
        let first = b.add_s64(first, row64);
        let split_rows = b.mul_wide_u32(batches, rows);
        let lse_acc = b.cvta_global(p.get(LSE_ACCUM));
        let lse0 = b.shl_b64(first, 2);
        let lse0 = b.add_s64(lse_acc, lse0);
        let lse_step = b.shl_b64(split_rows, 2);
        let lse_of = |b: &mut Builder, s: Reg<B32>, ok| -> Reg<F32> {
            let at = b.cvt_u64_u32(s);
            let at = b.mul_lo_u64(at, lse_step);
            let at = b.add_s64(lse0, at);
            let v = b.mov(NEG_INF);
            b.when(ok, false, |b| {
                let a = Addr::Global(at, 0);
                b.ld_into(Space::Global, LdCache::Volatile, Ty::F32, a, &[v])
            });
            v
        };
        let sum = WeightedSum::new(b, plan, &p, (lane, sub, row_warps), (first, split_rows));
        // the first run's loads go out before the row's lse is known: one round trip to
        // L2 for both at up to STEP x warps splits
        let run0 = sum.load_run(b, 0, &lse_of);
        let l2 = row_lse(b, lane, splits, &lse_of);
        let acc = sum.finish(b, run0, l2, &lse_of);
        if per_warp {
            let col = b.shl_b32(lane, 2u32);
            store_row(b, plan, &p, (lane, col), (batch, row), &acc, l2);
            return;
        }
        b.comment("-- the warps' sums meet in shared memory; warp 0 adds and stores --");
        let smem = b.smem_base();
        let col = b.shl_b32(lane, 2u32);
        let at = b.mad_lo_u32(warp, d, col);
        let at = b.shl_b32(at, 2u32);
        let at = b.add_u32(smem, at);
        let in_kernel = chunks_in(b, col, d, acc.len());
        for (c, a) in acc.iter().enumerate() {
            b.when(in_kernel[c], false, |b| {
                b.st(Space::Shared, Ty::F32, Addr::Shared(at, 512 * c as i32), a)
            });
        }
        b.bar_sync();
        let warp0 = b.setp_u32(Cmp::Eq, warp, 0u32);
        b.if_uniform(warp0, |b| {
            for w in 1..warps {
                for (c, a) in acc.iter().enumerate() {
                    b.when(in_kernel[c], false, |b| {
                        let off = (w * d * 4 + 512 * c as u32) as i32;
                        let x: [Reg<F32>; 4] = b.ld(
                            Space::Shared,
                            LdCache::Default,
                            Ty::F32,
                            Addr::Shared(at, off),
                        );
                        for (r, xi) in a.iter().zip(x) {
                            let y = b.add_f32(*r, xi);
                            b.assign(*r, y);
                        }
                    });
                }
            }
            store_row(b, plan, &p, (lane, col), (batch, row), &acc, l2);
        });
    };
    // (a warp's row is uniform in the warp only: no CTA barrier in that body)
    match per_warp {
        true => b.unless(past, body),
        false => b.unless_uniform(past, body),
    }
    let bounds = LaunchBounds {
        max_threads: Some(plan.tiles.threads()),
        min_ctas_per_sm: None,
        exact_threads: false,
    };
    b.finish(spec.name(), p.entry(), bounds)
}

/// The row's `lse * log2 e` over the splits (`+inf` when no split saw a key, so that
/// every weight `exp2(lse_s log2 e - it)` is 0); `lse_of(b, s, ok)` loads split `s`'s
/// lse where `ok` holds (else -inf).
fn row_lse(
    b: &mut Builder,
    lane: Reg<B32>,
    splits: Reg<B32>,
    lse_of: &impl Fn(&mut Builder, Reg<B32>, Reg<Pred>) -> Reg<F32>,
) -> Reg<F32> {
    b.comment("-- lse = m + log sum_s exp(lse_s - m), m = max_s lse_s --");
    let lses: Vec<Reg<F32>> = (0..GROUPS)
        .map(|j| {
            let s = b.add_u32(lane, 32 * j);
            let ok = b.setp_u32(Cmp::Lt, s, splits);
            lse_of(b, s, ok)
        })
        .collect();
    let m = lses[1..].iter().fold(lses[0], |m, &x| b.max_f32(m, x));
    let m = warp_reduce(b, m, |b, x, y| b.max_f32(x, y));
    // (every split empty: m = -inf; exp2(-inf - 0) = 0 keeps the sum 0, not NaN)
    let none = b.setp_f32(Cmp::Eq, m, NEG_INF);
    let m_safe = b.selp_f32(0.0f32, m, none);
    let m_l2 = b.mul_f32(m_safe, LOG2_E);
    let neg_m = b.neg_f32(m_l2);
    let sum = lses.iter().fold(None, |acc: Option<Reg<F32>>, &x| {
        let e = b.fma_f32(x, LOG2_E, neg_m);
        let e = b.ex2(e);
        Some(match acc {
            Some(a) => b.add_f32(a, e),
            None => e,
        })
    });
    let sum = warp_reduce(b, sum.expect("GROUPS > 0"), |b, x, y| b.add_f32(x, y));
    let empty = b.setp_f32(Cmp::Eq, sum, 0.0f32);
    let lg = b.lg2(sum);
    let l2 = b.add_f32(m_l2, lg);
    b.selp_f32(f32::INFINITY, l2, empty)
}

/// This warp's share of `sum_s exp2(lse_s log2 e - l2) o_s` (the lane's 4-float chunks),
/// in runs of [`STEP`] splits whose loads go out before their products.
struct WeightedSum<'a> {
    p: &'a Params,
    warps: u32,
    chunks: usize,
    warp: Reg<B32>,
    in_kernel: Vec<Reg<Pred>>,
    /// The lane's chunk of split 0's partial row.
    at0: Reg<B64>,
    /// Bytes from one split's partial rows to the next's.
    split_bytes: Reg<B64>,
}

impl<'a> WeightedSum<'a> {
    fn new(
        b: &mut Builder,
        plan: &KernelPlan,
        p: &'a Params,
        (lane, warp, warps): (Reg<B32>, Reg<B32>, u32),
        (first, split_rows): (Reg<B64>, Reg<B64>),
    ) -> Self {
        let d = plan.spec.head_dim;
        let chunks = d.div_ceil(4 * 32) as usize;
        let col = b.shl_b32(lane, 2u32);
        let in_kernel = chunks_in(b, col, d, chunks);
        // o_s of this row and lane: o_acc + ((s * batches + batch) * rows + row) * 4 d + 4 col
        let o_acc = b.cvta_global(p.get(O_ACCUM));
        let at0 = b.mul_lo_u64(first, 4 * i64::from(d));
        let at0 = b.add_s64(o_acc, at0);
        let col_bytes = b.mul_wide_u32(col, 4u32);
        let at0 = b.add_s64(at0, col_bytes);
        let split_bytes = b.mul_lo_u64(split_rows, 4 * i64::from(d));
        Self {
            p,
            warps,
            chunks,
            warp,
            in_kernel,
            at0,
            split_bytes,
        }
    }

    /// Run `k`'s loads: splits `warp + (k STEP + u) warps` for `u < STEP` (lse -inf and
    /// partial 0 past the split count).
    fn load_run(
        &self,
        b: &mut Builder,
        k: u32,
        lse_of: &impl Fn(&mut Builder, Reg<B32>, Reg<Pred>) -> Reg<F32>,
    ) -> Vec<Loaded> {
        let (splits, warps) = (self.p.get(NUM_SPLITS), self.warps);
        let s0 = b.add_u32(self.warp, k * STEP * warps);
        let s0_64 = b.cvt_u64_u32(s0);
        let off = b.mul_lo_u64(s0_64, self.split_bytes);
        let at = b.add_s64(self.at0, off);
        let split_stride = b.mul_lo_u64(self.split_bytes, i64::from(warps));
        (0..STEP)
            .map(|u| {
                let s = b.add_u32(s0, u * warps);
                let here = b.setp_u32(Cmp::Lt, s, splits);
                let lse = lse_of(b, s, here);
                let off = b.mul_lo_u64(split_stride, i64::from(u));
                let at = b.add_s64(at, off);
                let xs = (0..self.chunks)
                    .map(|c| {
                        let x: [Reg<F32>; 4] = std::array::from_fn(|_| b.mov(0.0f32));
                        let ok = b.and_pred(here, self.in_kernel[c]);
                        b.when(ok, false, |b| {
                            let addr = Addr::Global(at, 512 * c as i32);
                            b.ld_into(Space::Global, LdCache::Volatile, Ty::F32, addr, &x)
                        });
                        x
                    })
                    .collect();
                (lse, xs)
            })
            .collect()
    }

    /// The sum: run 0 (loaded) and the runs after it that hold a split.
    fn finish(
        &self,
        b: &mut Builder,
        run0: Vec<Loaded>,
        l2: Reg<F32>,
        lse_of: &impl Fn(&mut Builder, Reg<B32>, Reg<Pred>) -> Reg<F32>,
    ) -> Vec<[Reg<F32>; 4]> {
        b.comment("-- o = sum_s w_s o_s: runs of splits per warp, loads first --");
        let splits = self.p.get(NUM_SPLITS);
        let neg_l2 = b.neg_f32(l2);
        let acc: Vec<[Reg<F32>; 4]> = (0..self.chunks)
            .map(|_| std::array::from_fn(|_| b.mov(0.0f32)))
            .collect();
        let add_run = |b: &mut Builder, run: &[Loaded]| {
            for (lse, xs) in run {
                let w = b.fma_f32(*lse, LOG2_E, neg_l2);
                let w = b.ex2(w);
                for (a, x) in acc.iter().zip(xs) {
                    for (r, &xi) in a.iter().zip(x) {
                        let y = b.fma_f32(w, xi, *r);
                        b.assign(*r, y);
                    }
                }
            }
        };
        add_run(b, &run0);
        let done = b.label();
        for k in 1..MAX_SPLITS.div_ceil(STEP * self.warps) {
            let s0 = b.add_u32(self.warp, k * STEP * self.warps);
            let past = b.setp_u32(Cmp::Le, splits, s0);
            b.bra_if(past, false, done, true);
            let run = self.load_run(b, k, lse_of);
            add_run(b, &run);
        }
        b.place(done);
        acc
    }
}

/// Whether each of the lane's chunks (columns `col + 128 c ..`) is inside the kernel's
/// head dim `d`.
fn chunks_in(b: &mut Builder, col: Reg<B32>, d: u32, chunks: usize) -> Vec<Reg<Pred>> {
    (0..chunks)
        .map(|c| {
            let c = b.add_u32(col, 128 * c as u32);
            b.setp_u32(Cmp::Lt, c, d)
        })
        .collect()
}

/// Stores the row: `o[batch, pos, head]` (the problem's head dim) and, by lane 0 when the
/// lse pointer is not null, `lse[batch, head, pos]`.
fn store_row(
    b: &mut Builder,
    plan: &KernelPlan,
    p: &Params,
    (lane, col): (Reg<B32>, Reg<B32>),
    (batch, row): (Reg<B32>, Reg<B32>),
    acc: &[[Reg<F32>; 4]],
    l2: Reg<F32>,
) {
    b.comment("-- store o[batch, pos, head] and lse[batch, head, pos] --");
    let (pos, head) = output_coords(b, p, row);
    let o_row = p.tensor(b, &O, batch, pos, head);
    let o_col = b.mul_wide_u32(col, 2u32);
    let o_at = b.add_s64(o_row, o_col);
    let head_dim = p.get(HEAD_DIM);
    let fmt = half_fmt(plan.spec.dtype);
    for (c, a) in acc.iter().enumerate() {
        let cc = b.add_u32(col, 128 * c as u32);
        let in_problem = b.setp_u32(Cmp::Lt, cc, head_dim);
        let words = [b.pack(fmt, a[0], a[1]), b.pack(fmt, a[2], a[3])];
        b.when(in_problem, false, |b| {
            let at = Addr::Global(o_at, 256 * c as i32);
            b.st(Space::Global, Ty::B32, at, &words)
        });
    }
    // lse = l2 ln 2; l2 = +inf marks a row no split saw
    let empty = b.setp_f32(Cmp::Eq, l2, f32::INFINITY);
    let lse = b.mul_f32(l2, std::f32::consts::LN_2);
    let lse = b.selp_f32(NEG_INF, lse, empty);
    let lse_ptr = p.get(LSE);
    let on = b.setp_u64(Cmp::Ne, lse_ptr, 0i64);
    let lane0 = b.setp_u32(Cmp::Eq, lane, 0u32);
    let on = b.and_pred(on, lane0);
    let at = row_stats_base(b, p, LSE, p.get(HEADS), batch, head, pos);
    b.when(on, false, |b| {
        b.st(Space::Global, Ty::F32, Addr::Global(at, 0), &[lse])
    });
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
