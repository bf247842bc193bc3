//! Kernel layer: FlashAttention-2 backward, main pass (Dao 2023, Algorithm 2), parallel
//! over key blocks.
//!
//! One CTA per (key block, kv head, batch); each warp owns 16 keys per m-tile (with
//! [`TileConfig::exchange`](crate::spec::TileConfig::exchange): 32 keys, see
//! `bwd_exchange`). Scores are computed
//! transposed, S^T = K Q^T (rows = keys), so P^T and dS^T come out of the accumulators
//! already in the A-operand layout of dV += P^T dO and dK += dS^T Q. For every query
//! head of the kv head's group, in a fixed order, and every query block from the last
//! down to the causal diagonal, as FA2 runs them (Q and dO streamed through shared
//! memory):
//!   P^T = exp2(S^T * scale_log2 - LSE * log2 e)        (recomputed from the saved LSE)
//!   dV += P^T dO;  dP^T = V dO^T;  dS^T = P^T * (dP^T - D);  dK += dS^T Q
//!   dQ += dS K: dS^T goes through shared memory and every warp adds its query rows
//!   into the f32 accumulator with red.global.add.f32 (skipped when dq_accum is null:
//!   the deterministic mode computes dQ in its own pass). dS^T alternates between two
//!   tiles and each block's dQ runs in the next iteration, after the one barrier per
//!   block (exchange: right after the step's own barrier), so no barrier waits for it.
//! dK is scaled by softmax_scale at the end. With two sweeps (large head dims) the first
//! computes dV only and the second dK and dQ, so one accumulator lives at a time.

use super::bwd_atomic_dq::{AtomicDq, dq_warp};
use super::bwd_exchange::{ColStats, Exchange, StepTiles};
use super::stream::{BlockStream, CopyPlan};
use super::warp::Warp;
use super::warp_store::Cols;
use crate::abi;
use crate::kernels::half_fmt;
use crate::kernels::mask::QueryMask;
use crate::kernels::params::Params;
use crate::kernels::params::row_stats_base;
use crate::ptx::{B32, B64, Builder, Cmp, Entry, LaunchBounds, Pred, Reg, Special};
use crate::spec::{KernelPlan, Pass};
use crate::tile::copy::TileCopy;
use crate::tile::smem::SmemTile;

/// The entry of a [`Pass::Bwd`] spec.
pub fn build(plan: &KernelPlan) -> Entry {
    let spec = &plan.spec;
    assert_eq!(spec.pass, Pass::Bwd);
    let t = plan.tiles.sm80();
    let (d, bm, bn) = (spec.head_dim, t.block_m, t.block_n);
    let fmt = half_fmt(spec.dtype);
    let ir_params = abi::ir_params(spec.pass);
    let mut b = Builder::new();
    b.comment(format!(
        "{}: {bn} keys x {bm} queries, {} warps, {} sweeps, smem {} bytes",
        spec.name(),
        t.warps,
        t.sweeps,
        plan.smem.bytes
    ));
    let p = Params::load(&mut b, &ir_params);
    let (seqlen_q, seqlen_k, head_dim) = (p.u32("seqlen_q"), p.u32("seqlen_k"), p.u32("head_dim"));
    let (group, scale_log2) = (p.u32("heads_per_kv"), p.f32("scale_log2"));
    // every warp owns bn / warps keys (m16 tiles); exchange: 32 keys (two m-tiles) per
    // warp, the warps repeating over bn / 32 row blocks
    let w = if t.layout.exchange() {
        Warp::with_row_blocks(&mut b, 2, Some(bn / 32))
    } else {
        Warp::new(&mut b, (bn / t.warps / 16) as usize)
    };
    let n_block = b.special(Special::CtaIdX);
    let kv_head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let heads_k = b.special(Special::NCtaIdY);
    let heads = b.mul_lo_u32(heads_k, group);
    let n0 = b.mul_lo_u32(n_block, bn);
    let k_rows = b.sub_u32(seqlen_k, n0);
    let zero = b.mov(0u32);

    b.comment("-- shared memory: K, V (resident), Q and dO stages, dS^T --");
    let smem = b.smem_base();
    let [k_tile, v_tile] = [0, 1].map(|i| SmemTile::from(plan.smem.fixed[i]));
    let qs = BlockStream::new(
        &mut b,
        plan,
        &p,
        (
            w.tid,
            // two m-tiles per warp (the exchange layouts, d64 on 128 keys) need the
            // registers (d128: one-piece dP^T); measured 4-5% slower on the 64-key d64
            // row, which had registers to spare (session 6, run 5)
            if w.m_tiles >= 2 {
                CopyPlan::AtIssue
            } else {
                CopyPlan::Once
            },
        ),
        ["q_row_stride", "do_row_stride"],
    )
    .with_vectors(&mut b, 2)
    .downward();
    // (late: the next block's copies go out after the step's S^T, not right behind the
    // previous block's dQ atomics)
    let qs = if t.layout.late_prefetch() {
        qs.late_prefetch()
    } else {
        qs
    };
    // dS^T, then a second tile: P^T (exchange) or the next query block's dS^T
    let [ds_tile, second] = [0, 1].map(|i| SmemTile::from(plan.smem.exchange[i]));
    let exchange = t.layout.exchange().then(|| {
        let groups = t.warps / (bn / 32);
        Exchange {
            groups,
            group: b.div_u32(w.warp, bn / 32),
            pt_tile: second,
        }
    });
    // without exchange, dS^T of query block j sits in stage j & 1: the atomic dQ of block
    // j runs in the next iteration (block j - 1), past its barrier, so one barrier per
    // block suffices
    let ds_stage = |b: &mut Builder, j: Reg<B32>| {
        let parity = b.and_b32(j, 1u32);
        b.mad_lo_u32(parity, ds_tile.bytes(), smem)
    };
    for (tile, name) in [(&k_tile, "k"), (&v_tile, "v")] {
        let base = p.tensor(&mut b, name, batch, n0, kv_head);
        let copy = TileCopy::new(
            &mut b,
            tile,
            d,
            t.threads(),
            w.tid,
            p.u32(&format!("{name}_row_stride")),
            head_dim,
        );
        copy.issue(&mut b, smem, tile.base, base, k_rows);
    }
    if t.layout.resident() {
        b.cp_async_commit();
    }

    b.comment("-- query blocks that see this key block: from the causal diagonal on --");
    let n_qblocks = b.add_u32(seqlen_q, bm - 1);
    let n_qblocks = b.div_u32(n_qblocks, bm);
    let shift = b.sub_s32(seqlen_k, seqlen_q);
    let first_q = b.sub_s32(n0, shift); // first query that sees key n0
    let m_first = if spec.mask.is_causal() {
        let f = b.max_s32(first_q, 0i32);
        b.div_u32(f, bm)
    } else {
        zero
    };
    let key0 = b.add_u32(w.rows[0], n0);
    let qmask = QueryMask::new(&mut b, key0, w.t2, seqlen_q, seqlen_k);
    // the first query that sees the block's last key, computed from %ctaid and the
    // parameters where a query block needs it (exchange: at the step's call) rather than
    // kept live through the loops (d128 exchange: registers)
    let last_first_q = |b: &mut Builder| {
        let n_block = b.special(Special::CtaIdX);
        let k_last = b.mad_lo_u32(n_block, bn, bn - 1);
        let shift = b.sub_s32(seqlen_k, seqlen_q);
        b.sub_s32(k_last, shift)
    };
    let dq_on = b.setp_u64(Cmp::Ne, p.u64("dq_accum"), 0i64);
    let dq = AtomicDq {
        smem,
        ds_tile: &ds_tile,
        k_tile: &k_tile,
        batch_heads: (batch, heads),
        // (exchange: computed where used, to keep registers for the accumulators)
        warp: (!t.layout.exchange()).then(|| dq_warp(&mut b, plan, &w)),
    };
    for sweep in 0..t.sweeps {
        let (do_dv, do_dk) = match (t.sweeps, sweep) {
            (1, _) => (true, true),
            (_, 0) => (true, false),
            _ => (false, true),
        };
        b.comment(format!(
            "== sweep {sweep}: {} ==",
            if do_dv && do_dk {
                "dV, dK, dQ"
            } else if do_dv {
                "dV"
            } else {
                "dK, dQ"
            }
        ));
        // exchange: each warp accumulates its group's share of the head dim
        let acc_cols = exchange.as_ref().map_or(d, |x| d / x.groups);
        let mut dv = w.acc_zeros(&mut b, if do_dv { acc_cols } else { 0 });
        let mut dk = w.acc_zeros(&mut b, if do_dk { acc_cols } else { 0 });
        let gh = b.mov(0u32);
        let (head_top, head_done) = (b.label(), b.label());
        b.place(head_top);
        let more = b.setp_u32(Cmp::Lt, gh, group);
        b.bra_if(more, true, head_done, true);
        let head = b.mad_lo_u32(kv_head, group, gh);
        let q_base = p.tensor(&mut b, "q", batch, zero, head);
        let do_base = p.tensor(&mut b, "do", batch, zero, head);
        let lse = row_stats_base(&mut b, &p, "lse", heads, batch, head, zero);
        let dvec = row_stats_base(&mut b, &p, "dvec", heads, batch, head, zero);
        qs.start_vectors(&mut b, &[lse, dvec]);
        qs.start(
            &mut b,
            smem,
            [q_base, do_base],
            m_first,
            seqlen_q,
            n_qblocks,
        );
        b.cp_async_commit();
        // K and V (first head: in the group before Q's) have landed once this waits
        let [k_operand, v_operand] =
            w.a_operands(&mut b, t.layout.resident(), [&k_tile, &v_tile], smem, d);
        // query blocks run downward, from the last to m_first
        let (m0, st, lp) = qs.begin(&mut b, smem, seqlen_q, (m_first, n_qblocks));
        let j = qs.block();
        let deferred_dq = do_dk && exchange.is_none();
        // the atomic dQ of query block `blk` (first row `m0_blk`) when `exists`, deferred
        // past the barrier after it: its dS^T sits in stage blk & 1
        let deferred = |b: &mut Builder, exists: Reg<Pred>, (blk, m0_blk), what: &str| {
            let run = b.and_pred(dq_on, exists);
            b.comment(format!("-- atomic dQ of the {what} query block --"));
            let ds = ds_stage(b, blk);
            dq.emit_if(b, plan, &p, &w, run, ds, (head, m0_blk));
        };
        if deferred_dq {
            // the block before this one in the stream's order: j + 1
            let prev = b.add_u32(j, 1u32);
            let has_prev = b.setp_u32(Cmp::Lt, prev, n_qblocks);
            let m0_prev = b.add_u32(m0, bm);
            deferred(&mut b, has_prev, (prev, m0_prev), "previous");
        }
        let [q_tile, do_tile] = qs.tiles;
        let (lse_smem, d_smem) = (
            qs.vector_addr(&mut b, smem, 0),
            qs.vector_addr(&mut b, smem, 1),
        );
        if let Some(x) = &exchange {
            // the group's query columns of the LSE and D vectors
            let off = b.mul_lo_u32(x.group, 4 * x.q_cols(bm));
            let (ls, ds) = (b.add_u32(lse_smem, off), b.add_u32(d_smem, off));
            let stats = ColStats::new(&mut b, &w, ls, ds);
            let tiles = StepTiles {
                k: &k_tile,
                v: &v_tile,
                q: &q_tile,
                d_o: &do_tile,
                ds: &ds_tile,
                smem,
                st,
            };
            let causal = spec
                .mask
                .is_causal()
                .then(|| (&qmask, last_first_q(&mut b)));
            x.step(
                &mut b,
                fmt,
                &w,
                &tiles,
                &stats,
                scale_log2,
                causal,
                m0,
                (&mut dv, &mut dk),
                &mut |b: &mut Builder| qs.prefetch(b, smem, seqlen_q, (m_first, n_qblocks)),
            );
        } else {
            let stats = ColStats::new(&mut b, &w, lse_smem, d_smem);
            let ds_cur = if deferred_dq {
                ds_stage(&mut b, j)
            } else {
                smem
            };

            // Query columns in sub-blocks of 32: S^T and dP^T of one sub-block live at a time.
            let sub = bm.min(32);
            for c0 in (0..bm).step_by(sub as usize) {
                let (q_sub, do_sub) = (q_tile.rows_from(c0), do_tile.rows_from(c0));
                let nt0 = (c0 / 8) as usize;
                b.comment(format!(
                    "-- query columns {c0}..{}: P^T = exp2(K Q^T * scale_log2 - LSE * log2 e) --",
                    c0 + sub
                ));
                let mut pt = w.acc_zeros(&mut b, sub);
                w.mma_a_bt(&mut b, fmt, &mut pt, &k_operand, (&q_sub, st), d);
                if spec.mask.is_causal() {
                    let m0c = b.add_u32(m0, c0);
                    let lfq = last_first_q(&mut b);
                    let needs = b.setp_s32(Cmp::Lt, m0c, lfq);
                    b.if_uniform(needs, |b| qmask.apply(b, &mut pt, m0c));
                }
                stats.probabilities(&mut b, &mut pt, nt0, scale_log2);
                if do_dv {
                    b.comment("-- dV += P^T dO --");
                    let a = pt.as_a_all(&mut b, fmt);
                    w.mma_a_b(&mut b, fmt, &mut dv, &a, (&do_sub, st), 0);
                }
                // two m-tiles per warp (d64 on 128 keys): dS^T in 16-column halves, for the
                // registers (sm_80 spilled 32 bytes in one piece; session 8)
                let halves = if w.m_tiles >= 2 && sub >= 32 { 2 } else { 1 };
                let part = sub / halves;
                for h in (0..halves).filter(|_| do_dk) {
                    b.comment("-- dS^T = P^T * (V dO^T - D); dK += dS^T Q --");
                    let c = c0 + h * part;
                    let pt_nt0 = (h * part / 8) as usize;
                    let mut ds = w.acc_zeros(&mut b, part);
                    w.mma_a_bt(
                        &mut b,
                        fmt,
                        &mut ds,
                        &v_operand,
                        (&do_tile.rows_from(c), st),
                        d,
                    );
                    stats.ds(&mut b, &pt, &mut ds, nt0 + pt_nt0, pt_nt0);
                    let a = ds.as_a_all(&mut b, fmt);
                    w.mma_a_b(&mut b, fmt, &mut dk, &a, (&q_tile.rows_from(c), st), 0);
                    let cols = Cols::Fixed(nt0 + pt_nt0);
                    b.if_uniform(dq_on, |b| w.store_tile(b, fmt, &ds, ds_cur, &ds_tile, cols));
                }
            }
        }
        if do_dk && exchange.is_some() {
            // dS^T is complete since the step's barrier
            dq.emit_if(&mut b, plan, &p, &w, dq_on, smem, (head, m0));
        }
        qs.end(&mut b, lp);
        // every warp is done with the stages (the next head restarts the stream) and the
        // last block's dS^T is complete
        b.bar_sync();
        if deferred_dq {
            // the stream's last block: m_first
            let any = b.setp_u32(Cmp::Lt, m_first, n_qblocks);
            let m0_first = b.mul_lo_u32(m_first, bm);
            deferred(&mut b, any, (m_first, m0_first), "last");
        }
        let ngh = b.add_u32(gh, 1u32);
        b.assign(gh, ngh);
        b.bra(head_top, true);
        b.place(head_done);

        // the key block's ids and rows re-read here rather than kept live through the
        // loops (d128 on 128 keys: 12 spill bytes for sm_80 otherwise)
        let (n_block, kv_head, batch) = (
            b.special(Special::CtaIdX),
            b.special(Special::CtaIdY),
            b.special(Special::CtaIdZ),
        );
        let n0 = b.mul_lo_u32(n_block, bn);
        let k_rows = b.sub_u32(seqlen_k, n0);
        // exchange: the warp's head-dim columns start at group * d / groups
        let cols = |b: &mut Builder, base: Reg<B64>| match &exchange {
            Some(x) => x.cols_from(b, d, base, head_dim),
            None => (base, head_dim),
        };
        if do_dv {
            let base = p.tensor(&mut b, "dv", batch, n0, kv_head);
            let (base, hd) = cols(&mut b, base);
            w.store_rows(&mut b, fmt, &dv, base, p.u32("dv_row_stride"), hd, k_rows);
        }
        if do_dk {
            let scale = p.f32("softmax_scale");
            dk.scale(&mut b, scale);
            let base = p.tensor(&mut b, "dk", batch, n0, kv_head);
            let (base, hd) = cols(&mut b, base);
            w.store_rows(&mut b, fmt, &dk, base, p.u32("dk_row_stride"), hd, k_rows);
        }
    }
    let bounds = LaunchBounds {
        max_threads: Some(t.threads()),
        min_ctas_per_sm: None,
    };
    b.finish(spec.name(), ir_params, bounds)
}
