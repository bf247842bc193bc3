//! Kernel layer, sm_90a: the first Hopper forward (issue 22, step 2; not yet in the spec
//! key: built per (dtype, head dim, mask) here and launched by
//! `FlashAttention::launch_fwd_sm90`). FA3's roles without its overlaps:
//!
//! - 3 warpgroups, one CTA per (128-query block, head, batch). Warpgroup 0 is the producer
//!   (`setmaxnreg.dec 24`): one thread loads Q once and K, V through 2-stage rings, each
//!   stage behind a full barrier (TMA bytes) and an empty one (one arrival per consumer).
//! - Warpgroups 1 and 2 are consumers (`setmaxnreg.inc 240`) of 64 query rows each. Per key
//!   block of 128: S = Q K^T (SS `wgmma`, K-major), release K, mask (sequence end, causal
//!   diagonal, bottom-right aligned), the shared `OnlineSoftmax` on the `AccTile`, P by
//!   `as_a`, O += P V (RS `wgmma` against V MN-major), release V.
//! - Epilogue: O /= l, O stored row by row from the accumulator layout, the LSE.
//!
//! Parameters: the q, k, v tensor maps (4D `[b, s, h, d]`, boxes `{64, 1, 128, 1}`, the
//! 128-byte swizzle), then [`SCALARS`].

use super::EntryParams;
use crate::kernels::half_fmt;
use crate::kernels::softmax::OnlineSoftmax;
use crate::ptx::inst::ScaleD;
use crate::ptx::{
    Addr, B32, B64, Builder, Cmp, Entry, F32, LaunchBounds, Module, Operand, Reg, Space, Special,
    Target, Ty,
};
use crate::spec::DType;
use crate::tile::acc::AccTile;
use crate::tile::desc::{Major, WgmmaDesc};
use crate::tile::smem::{ROW_BYTES, SmemTile};

/// Query rows per CTA (64 per consumer warpgroup).
pub const BLOCK_M: u32 = 128;
/// Keys per block.
pub const BLOCK_N: u32 = 128;
/// Threads: producer + two consumer warpgroups.
pub const THREADS: u32 = 384;
/// Buffers of the K and V rings.
const STAGES: u32 = 2;
/// Rows of a consumer warpgroup.
const WG_ROWS: u32 = 64;

/// Tensor-map parameters, in order.
pub const MAPS: [&str; 3] = ["tm_q", "tm_k", "tm_v"];

/// Scalar parameters after the maps: `o` (u64), `lse` (u64, 0 = none: `[b, h, sq]` f32),
/// u32 `seqlen_q`, `seqlen_k`, `group` (heads / heads_k), `heads`, `o_row` and `o_head`
/// (o's strides in elements), u64 `o_batch`, f32 `scale_log2` (softmax scale * log2 e).
pub const SCALARS: [(&str, Ty); 10] = [
    ("o", Ty::U64),
    ("lse", Ty::U64),
    ("seqlen_q", Ty::U32),
    ("seqlen_k", Ty::U32),
    ("group", Ty::U32),
    ("heads", Ty::U32),
    ("o_row", Ty::U32),
    ("o_head", Ty::U32),
    ("o_batch", Ty::U64),
    ("scale_log2", Ty::F32),
];

/// Head dims the kernel takes.
pub const HEAD_DIMS: [u32; 2] = [64, 128];

/// Shared memory: 9 mbarriers, then Q, the K stages, the V stages (1024-byte aligned).
struct Layout {
    tile_bytes: u32,
    q: u32,
    k: u32,
    v: u32,
}

/// Barrier offsets: Q full; K full, K empty, V full, V empty per stage.
const Q_FULL: i32 = 0;
const K_FULL: i32 = 8;
const K_EMPTY: i32 = 24;
const V_FULL: i32 = 40;
const V_EMPTY: i32 = 56;

impl Layout {
    fn new(d: u32) -> Self {
        let tile_bytes = BLOCK_N * d * 2;
        let q = 1024;
        let k = q + BLOCK_M * d * 2;
        Layout {
            tile_bytes,
            q,
            k,
            v: k + STAGES * tile_bytes,
        }
    }
    fn bytes(&self) -> u32 {
        self.v + STAGES * self.tile_bytes
    }
}

/// Dynamic shared memory of the `d` kernel.
pub fn smem_bytes(d: u32) -> u32 {
    Layout::new(d).bytes()
}

/// Entry name (`_debug` for the build with bounded waits).
pub fn entry_name(dtype: DType, d: u32, causal: bool, debug: bool) -> String {
    let mask = if causal { "_causal" } else { "" };
    let dbg = if debug { "_debug" } else { "" };
    format!("fa3_fwd_d{d}_{}{mask}_sm90a{dbg}", dtype.name())
}

/// The module (one entry). `debug` bounds every mbarrier wait ([`Builder::bound_waits`]).
pub fn module(dtype: DType, d: u32, causal: bool, debug: bool) -> Module {
    assert!(HEAD_DIMS.contains(&d), "generator bug: sm90 forward d{d}");
    let (fmt, lay) = (half_fmt(dtype), Layout::new(d));
    let mut b = Builder::new();
    if debug {
        b.bound_waits(1 << 22);
    }
    let ep = EntryParams::load(&mut b, &MAPS, &SCALARS);
    let tm = ep.maps.clone();
    let (o_ptr, lse_ptr, sq, sk) = (ep.u64(0), ep.u64(1), ep.u32(2), ep.u32(3));
    let (group, heads, o_row, o_head) = (ep.u32(4), ep.u32(5), ep.u32(6), ep.u32(7));
    let (o_batch, scale_log2) = (ep.u64(8), ep.f32(9));

    let tid = b.special(Special::TidX);
    let smem = b.smem_base();
    let first = b.setp_u32(Cmp::Eq, tid, 0u32);
    let m0 = {
        let x = b.special(Special::CtaIdX);
        b.mul_lo_u32(x, BLOCK_M)
    };
    let head = b.special(Special::CtaIdY);
    let batch = b.special(Special::CtaIdZ);
    let kv_head = b.div_u32(head, group);
    let n_blocks = key_blocks(&mut b, causal, m0, sq, sk);
    let bar = |off: i32| Addr::Shared(smem, off);

    b.comment("-- barriers: Q full; per stage K full / empty, V full / empty --");
    b.when(first, false, |b| {
        b.mbarrier_init(bar(Q_FULL), 1);
        for s in 0..STAGES as i32 {
            b.mbarrier_init(bar(K_FULL + 8 * s), 1);
            b.mbarrier_init(bar(V_FULL + 8 * s), 1);
            b.mbarrier_init(bar(K_EMPTY + 8 * s), 2);
            b.mbarrier_init(bar(V_EMPTY + 8 * s), 2);
        }
    });
    b.fence_mbarrier_init();
    b.bar_sync();
    let wg = b.shr_u32(tid, 7);
    let producer = b.setp_u32(Cmp::Eq, wg, 0u32);
    let ctx = Ctx {
        d,
        lay,
        smem,
        n_blocks,
        head,
        kv_head,
        batch,
    };
    b.if_else_uniform(
        producer,
        |b| {
            b.setmaxnreg(false, 24);
            let others = b.setp_u32(Cmp::Ne, tid, 0u32);
            b.unless(others, |b| ctx.produce(b, &tm, m0));
        },
        |b| {
            b.setmaxnreg(true, 240);
            let c = Consumer {
                fmt,
                causal,
                scale_log2,
                sq,
                sk,
            };
            let (o, lse, row) = c.consume(b, &ctx, tid, wg, m0);
            let out = Out {
                o_ptr,
                lse_ptr,
                o_row,
                o_head,
                o_batch,
                heads,
            };
            c.epilogue(b, &ctx, &out, &o, &lse, row);
        },
    );
    let entry: Entry = b.finish(
        entry_name(dtype, d, causal, debug),
        ep.params,
        LaunchBounds {
            max_threads: Some(THREADS),
            min_ctas_per_sm: Some(1),
        },
    );
    Module {
        target: Target::Sm90a,
        entries: vec![entry],
    }
}

/// Key blocks the query block at `m0` visits: `ceil(sk / 128)`, causal: up to its last
/// row's diagonal `m0 + 127 + sk - sq` (none when that is negative).
fn key_blocks(b: &mut Builder, causal: bool, m0: Reg<B32>, sq: Reg<B32>, sk: Reg<B32>) -> Reg<B32> {
    let nk = b.add_u32(sk, BLOCK_N - 1);
    let nk = b.shr_u32(nk, BLOCK_N.trailing_zeros());
    if !causal {
        return nk;
    }
    let end = b.add_u32(m0, BLOCK_M);
    let end = b.add_u32(end, sk);
    let end = b.sub_s32(end, sq);
    let end = b.max_s32(end, 0i32);
    let nc = b.add_u32(end, BLOCK_N - 1);
    let nc = b.shr_u32(nc, BLOCK_N.trailing_zeros());
    b.min_u32(nk, nc)
}

/// What both roles share.
struct Ctx {
    d: u32,
    lay: Layout,
    smem: Reg<B32>,
    n_blocks: Reg<B32>,
    head: Reg<B32>,
    kv_head: Reg<B32>,
    batch: Reg<B32>,
}

impl Ctx {
    /// Stage `s` (0, 1) and phase parity `(n / 2) & 1` of key block `n`, and the stage's
    /// byte offset `s * tile_bytes`.
    fn stage(&self, b: &mut Builder, n: Reg<B32>) -> (Reg<B32>, Reg<B32>, Reg<B32>) {
        let s = b.and_b32(n, 1u32);
        let ph = b.shr_u32(n, 1u32);
        let ph = b.and_b32(ph, 1u32);
        let off = b.mul_lo_u32(s, self.lay.tile_bytes);
        (s, ph, off)
    }

    /// The barrier at `base + 8 s`.
    fn bar(&self, b: &mut Builder, s: Reg<B32>, base: i32) -> Addr {
        let a = b.mad_lo_u32(s, 8u32, self.smem);
        Addr::Shared(a, base)
    }

    /// TMA loads of a 128-row tile (one box per 64 columns) at shared offset `dst`
    /// (`stage` bytes further), rows from `row`, head `h`, completing on `full`.
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        b: &mut Builder,
        tm: Reg<B64>,
        dst: u32,
        stage: Reg<B32>,
        row: Reg<B32>,
        h: Reg<B32>,
        full: Addr,
    ) {
        b.mbarrier_arrive_expect_tx(full, BLOCK_N * self.d * 2);
        let at = b.add_u32(self.smem, stage);
        for p in 0..self.d / 64 {
            let coords = vec![
                Operand::Imm(64 * p as i64),
                h.into(),
                row.into(),
                self.batch.into(),
            ];
            let off = dst + p * BLOCK_N * ROW_BYTES;
            b.tma_load(Addr::Shared(at, off as i32), tm, coords, full);
        }
    }

    /// The producer thread: Q, then K and V of every key block into the rings; then waits
    /// for the consumers' last release so no copy outlives it.
    fn produce(&self, b: &mut Builder, tm: &[Reg<B64>], m0: Reg<B32>) {
        let zero = b.mov(0u32);
        let q_full = Addr::Shared(self.smem, Q_FULL);
        self.load(b, tm[0], self.lay.q, zero, m0, self.head, q_full);
        let n = b.mov(0u32);
        let lp = b.loop_start_divergent();
        let more = b.setp_u32(Cmp::Lt, n, self.n_blocks);
        b.loop_exit_unless(&lp, more);
        let (s, ph, off) = self.stage(b, n);
        let free = b.xor_b32(ph, 1u32);
        let row = b.mul_lo_u32(n, BLOCK_N);
        let (k_empty, k_full) = (self.bar(b, s, K_EMPTY), self.bar(b, s, K_FULL));
        b.mbarrier_wait(k_empty, free, "K empty");
        self.load(b, tm[1], self.lay.k, off, row, self.kv_head, k_full);
        let (v_empty, v_full) = (self.bar(b, s, V_EMPTY), self.bar(b, s, V_FULL));
        b.mbarrier_wait(v_empty, free, "V empty");
        self.load(b, tm[2], self.lay.v, off, row, self.kv_head, v_full);
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
        let none = b.setp_u32(Cmp::Eq, self.n_blocks, 0u32);
        b.unless(none, |b| {
            let last = b.sub_u32(self.n_blocks, 1u32);
            let (s, ph, _) = self.stage(b, last);
            let v_empty = self.bar(b, s, V_EMPTY);
            b.mbarrier_wait(v_empty, ph, "V empty (drain)");
        });
    }
}

/// A consumer warpgroup's constants.
struct Consumer {
    fmt: crate::ptx::HalfFmt,
    causal: bool,
    scale_log2: Reg<F32>,
    sq: Reg<B32>,
    sk: Reg<B32>,
}

/// Where the epilogue writes.
struct Out {
    o_ptr: Reg<B64>,
    lse_ptr: Reg<B64>,
    o_row: Reg<B32>,
    o_head: Reg<B32>,
    o_batch: Reg<B64>,
    heads: Reg<B32>,
}

impl Consumer {
    /// The key-block loop; returns O (unnormalised), the rows' LSE and the thread's first
    /// query row.
    fn consume(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        tid: Reg<B32>,
        wg: Reg<B32>,
        m0: Reg<B32>,
    ) -> (AccTile, Vec<Reg<F32>>, Reg<B32>) {
        let (d, lay, smem) = (ctx.d, &ctx.lay, ctx.smem);
        let cw = b.sub_u32(wg, 1u32);
        let lane = b.special(Special::LaneId);
        let warp = b.shr_u32(tid, 5u32);
        let warp = b.and_b32(warp, 3u32);
        let g = AccTile::lane_row(b, lane);
        let t2 = AccTile::lane_col(b, lane);
        let row = b.mad_lo_u32(cw, WG_ROWS, m0);
        let row = b.mad_lo_u32(warp, 16u32, row);
        let row = b.add_u32(row, g);
        let wg_lead = {
            let x = b.and_b32(tid, 127u32);
            b.setp_u32(Cmp::Eq, x, 0u32)
        };
        b.mbarrier_wait(Addr::Shared(smem, Q_FULL), 0u32, "Q full");
        let q = WgmmaDesc::new(SmemTile::new(lay.q, BLOCK_M, d), Major::K);
        let q_rows = b.mad_lo_u32(cw, WG_ROWS * ROW_BYTES, smem);
        let q0 = q.emit(b, q_rows);
        let k = WgmmaDesc::new(SmemTile::new(lay.k, BLOCK_N, d), Major::K);
        let v = WgmmaDesc::new(SmemTile::new(lay.v, BLOCK_N, d), Major::Mn);
        let mut o = AccTile::zeros(b, 1, d);
        let mut softmax = OnlineSoftmax::new(b, o.rows(), self.scale_log2);
        let diag = b.sub_s32(self.sk, self.sq);
        let n = b.mov(0u32);
        let lp = b.loop_start();
        let more = b.setp_u32(Cmp::Lt, n, ctx.n_blocks);
        b.loop_exit_unless(&lp, more);
        let (st, ph, off) = ctx.stage(b, n);
        let stage_smem = b.add_u32(smem, off);
        let k_full = ctx.bar(b, st, K_FULL);
        b.mbarrier_wait(k_full, ph, "K full");
        b.comment("-- S = Q K^T --");
        let mut s = AccTile::for_wgmma(b, BLOCK_N);
        let s_regs = s.wgmma_regs();
        let k0 = k.emit(b, stage_smem);
        b.wgmma_fence();
        for kk in 0..q.k_steps() {
            let (qd, kd) = (q.emit_kstep(b, q0, kk), k.emit_kstep(b, k0, kk));
            b.wgmma_ss(self.fmt, &s_regs, qd, false, kd, false, ScaleD::Imm(kk > 0));
        }
        b.wgmma_commit();
        b.wgmma_wait(0);
        let k_empty = ctx.bar(b, st, K_EMPTY);
        b.when(wg_lead, false, |b| b.mbarrier_arrive(k_empty));
        b.comment("-- mask: keys past the end, and past each row's diagonal --");
        let n0 = b.mul_lo_u32(n, BLOCK_N);
        s.mask(b, Cmp::Gt, |b, r| {
            let limit = if self.causal {
                let rr = b.add_u32(row, AccTile::row_offset(r));
                let lim = b.add_s32(rr, diag);
                let lim = b.add_s32(lim, 1i32);
                b.min_s32(lim, self.sk)
            } else {
                self.sk
            };
            let rel = b.sub_s32(limit, t2);
            b.sub_s32(rel, n0)
        });
        softmax.step(b, &mut s, &mut o);
        let p = s.as_a(b, self.fmt, 0);
        b.comment("-- O += P V --");
        let v_full = ctx.bar(b, st, V_FULL);
        b.mbarrier_wait(v_full, ph, "V full");
        let v0 = v.emit(b, stage_smem);
        let o_regs = o.wgmma_regs();
        b.wgmma_fence();
        for (kk, a) in p.iter().enumerate() {
            let vd = v.emit_kstep(b, v0, kk as u32);
            b.wgmma_rs(self.fmt, &o_regs, *a, vd, true, ScaleD::Imm(true));
        }
        b.wgmma_commit();
        b.wgmma_wait(0);
        let v_empty = ctx.bar(b, st, V_EMPTY);
        b.when(wg_lead, false, |b| b.mbarrier_arrive(v_empty));
        let n1 = b.add_u32(n, 1u32);
        b.assign(n, n1);
        b.loop_end(lp);
        let lse = softmax.finish(b, &mut o);
        (o, lse, row)
    }

    /// O (normalised) to the dtype, stored pair by pair for rows below `seqlen_q`; the
    /// LSE by lane t = 0 of each quad when `lse` is not null.
    fn epilogue(
        &self,
        b: &mut Builder,
        ctx: &Ctx,
        out: &Out,
        o: &AccTile,
        lse: &[Reg<F32>],
        row: Reg<B32>,
    ) {
        b.comment("-- epilogue: O and the LSE --");
        let lane = b.special(Special::LaneId);
        let t2 = AccTile::lane_col(b, lane);
        let bo = b.cvt_u64_u32(ctx.batch);
        let bo = b.mul_lo_u64(bo, out.o_batch);
        let ho = b.mul_wide_u32(ctx.head, out.o_head);
        let base = b.add_s64(bo, ho);
        let base = b.shl_b64(base, 1);
        let base = b.add_s64(out.o_ptr, base);
        let base = b.cvta_global(base);
        let col = b.mul_wide_u32(t2, 2u32);
        let base = b.add_s64(base, col);
        let no_lse = b.setp_u64(Cmp::Eq, out.lse_ptr, 0i64);
        let other = b.setp_u32(Cmp::Ne, t2, 0u32);
        let skip_lse = b.or_pred(no_lse, other);
        let lse_row0 = b.mad_lo_u32(ctx.batch, out.heads, ctx.head);
        let lse_row0 = b.mul_lo_u32(lse_row0, self.sq);
        for r in 0..o.rows() {
            let rr = b.add_u32(row, AccTile::row_offset(r));
            let out_of = b.setp_u32(Cmp::Ge, rr, self.sq);
            let off = b.mul_wide_u32(rr, out.o_row);
            let off = b.shl_b64(off, 1);
            let at = b.add_s64(base, off);
            b.unless(out_of, |b| {
                for nt in 0..o.n_tiles() {
                    let [lo, hi] = o.pair(r, nt);
                    let w = b.pack(self.fmt, lo, hi);
                    b.st(
                        Space::Global,
                        Ty::B32,
                        Addr::Global(at, 16 * nt as i32),
                        &[w],
                    );
                }
            });
            let skip = b.or_pred(skip_lse, out_of);
            b.unless(skip, |b| {
                let i = b.add_u32(lse_row0, rr);
                let a = b.mad_wide_u32(i, 4u32, out.lse_ptr);
                let a = b.cvta_global(a);
                b.st(Space::Global, Ty::F32, Addr::Global(a, 0), &[lse[r]]);
            });
        }
    }
}
