//! PTX IR layer: the Hopper (sm_90 / sm_90a) instruction families: warpgroup MMA
//! (`wgmma`), transaction barriers (`mbarrier`), tensor-memory copies (`cp.async.bulk
//! .tensor`, TMA), proxy fences, register reallocation (`setmaxnreg`), `elect.sync`,
//! `stmatrix` and named-barrier arrivals.
//!
//! Each family is one [`Inst`](super::inst::Inst) variant holding a type from here; the
//! constructors check what ptxas would reject (shapes, register counts, immediates) so a
//! value that exists is one the printer may write. Semantics and the facts behind each
//! check: shared/docs/ptx-reference.md section 10 (verified on the H200).

use super::modifiers::HalfFmt;
use super::types::{Addr, B32, B64, F32, Operand, Pred, Reg};

/// What sets the accumulator's `scale-d`: D = A*B + D when true, D = A*B when false.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScaleD {
    /// An immediate: `1` accumulates, `0` overwrites (the first k-step of a product).
    Imm(bool),
    /// A predicate register, true to accumulate.
    Pred(Reg<Pred>),
}

/// The A operand of a `wgmma`: a shared-memory descriptor (SS form) or four registers
/// holding this thread's 16-bit pairs of a 64 x 16 tile (RS form; ptx-reference §10.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WgmmaA {
    /// A 64-bit shared-memory matrix descriptor (`tile::desc`), with `trans` = MN-major.
    Desc {
        /// The descriptor.
        desc: Reg<B64>,
        /// `imm-trans-a`: the tile is MN-major (M contiguous) rather than K-major.
        trans: bool,
    },
    /// This thread's fragment of A, `mma.sync`'s A layout per warp.
    Regs([Reg<B32>; 4]),
}

/// `wgmma.mma_async.sync.aligned.m64nNk16.f32.h.h`: D(64 x N) (+)= A(64 x 16) * B(16 x N)
/// over the 128 threads of a warpgroup, f32 accumulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Wgmma {
    /// N, a multiple of 8 from 8 to 256.
    pub n: u32,
    /// The 16-bit format of A and B.
    pub fmt: HalfFmt,
    /// The accumulator, N / 2 registers per thread (read and written).
    pub d: Vec<Reg<F32>>,
    /// A: descriptor or registers.
    pub a: WgmmaA,
    /// B: a shared-memory descriptor.
    pub b: Reg<B64>,
    /// `imm-trans-b`: B is MN-major (N contiguous: V in its row-major `[kv][d]` image).
    pub trans_b: bool,
    /// Accumulate or overwrite.
    pub scale_d: ScaleD,
}

impl Wgmma {
    /// A checked `wgmma` (`imm-scale-a` and `imm-scale-b` are 1: no negation).
    pub fn new(
        fmt: HalfFmt,
        d: Vec<Reg<F32>>,
        a: WgmmaA,
        b: Reg<B64>,
        trans_b: bool,
        scale_d: ScaleD,
    ) -> Self {
        let n = 2 * d.len() as u32;
        assert!(
            n % 8 == 0 && (8..=256).contains(&n),
            "generator bug: wgmma m64n{n}k16 (N must be a multiple of 8 in 8..=256; {} accumulator registers)",
            d.len()
        );
        Wgmma {
            n,
            fmt,
            d,
            a,
            b,
            trans_b,
            scale_d,
        }
    }
}

/// The `wgmma` family: the product and the fences and groups that order it.
#[derive(Clone, Debug, PartialEq)]
pub enum WgmmaOp {
    /// `wgmma.fence.sync.aligned`: before the first `wgmma`, and after any register write
    /// to an accumulator or A fragment a `wgmma` reads.
    Fence,
    /// `wgmma.mma_async...`: issues one product.
    Mma(Wgmma),
    /// `wgmma.commit_group.sync.aligned`: closes the group of products issued since the last.
    Commit,
    /// `wgmma.wait_group.sync.aligned n`: waits until at most `n` groups are in flight.
    Wait(u32),
}

/// The `mbarrier` family (8-byte objects in shared memory, `.shared::cta`, `.b64`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MbarrierOp {
    /// `mbarrier.init [bar], count`: arrivals expected per phase.
    Init {
        /// The barrier (8-byte aligned).
        bar: Addr,
        /// Arrivals that complete a phase.
        count: Operand<B32>,
    },
    /// `mbarrier.arrive _, [bar]`: one arrival.
    Arrive {
        /// The barrier.
        bar: Addr,
    },
    /// `mbarrier.arrive.expect_tx _, [bar], bytes`: adds `bytes` to the phase's expected
    /// transaction count, then arrives (the producer of a TMA load).
    ArriveExpectTx {
        /// The barrier.
        bar: Addr,
        /// Bytes the phase's copies will complete (the full box, even where it is out of
        /// bounds and zero-filled).
        bytes: Operand<B32>,
    },
    /// `mbarrier.try_wait.parity p, [bar], parity`: `p` = whether the phase of parity
    /// `parity` has completed (may return false after a bounded wait; loop on it).
    TryWaitParity {
        /// Destination predicate.
        p: Reg<Pred>,
        /// The barrier.
        bar: Addr,
        /// The parity waited for (0 or 1; the waiter flips it per completed phase).
        parity: Operand<B32>,
    },
}

/// A tensor map's generic address (`cvta.param` of a `.param .align 64 .b8 [128]`) and
/// the box's coordinates, innermost dimension first, in elements.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorCoords {
    /// The tensor map's generic address.
    pub tmap: Reg<B64>,
    /// One coordinate per dimension (2 to 5), innermost first.
    pub coords: Vec<Operand<B32>>,
}

impl TensorCoords {
    /// Checked coordinates (2 to 5 dimensions; 1D boxes are not used).
    pub fn new(tmap: Reg<B64>, coords: Vec<Operand<B32>>) -> Self {
        assert!(
            (2..=5).contains(&coords.len()),
            "generator bug: a {}D tensor copy (2D to 5D)",
            coords.len()
        );
        TensorCoords { tmap, coords }
    }
    /// The map's rank.
    pub fn rank(&self) -> usize {
        self.coords.len()
    }
}

/// The bulk-copy family (TMA): tensor loads completing on an mbarrier, tensor stores in
/// bulk groups, and their groups.
#[derive(Clone, Debug, PartialEq)]
pub enum BulkOp {
    /// `cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes
    /// [dst], [tmap, {c...}], [bar]`: one box into shared memory; its bytes complete on `bar`.
    TensorLoad {
        /// The box's shared-memory image (1024-byte aligned for the 128-byte swizzle).
        dst: Addr,
        /// The map and the box's coordinates.
        src: TensorCoords,
        /// The mbarrier the bytes complete on.
        bar: Addr,
    },
    /// `cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [tmap, {c...}], [src]`:
    /// one box from shared memory (written before, then `fence.proxy.async` and a barrier).
    TensorStore {
        /// The map and the box's coordinates.
        dst: TensorCoords,
        /// The box's shared-memory image.
        src: Addr,
    },
    /// `cp.async.bulk.commit_group`: closes the group of bulk stores issued since the last.
    Commit,
    /// `cp.async.bulk.wait_group[.read] n`: at most `n` groups in flight; with `read`, only
    /// their reads of shared memory are waited for (the source may be reused).
    Wait {
        /// Groups that may stay in flight.
        pending: u32,
        /// Wait for the shared-memory reads only.
        read: bool,
    },
    /// `prefetch.tensormap [tmap]`: brings a tensor map into the descriptor cache.
    PrefetchTensormap {
        /// The map's generic address.
        tmap: Reg<B64>,
    },
}

/// Memory fences between proxies and for barrier initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// `fence.proxy.async.shared::cta`: this thread's ordinary shared-memory writes become
    /// visible to the async proxy (wgmma operands, TMA stores).
    ProxyAsyncShared,
    /// `fence.mbarrier_init.release.cluster`: makes `mbarrier.init`s visible (then a barrier).
    MbarrierInit,
}

/// `setmaxnreg.{inc,dec}.sync.aligned.u32 count`: the warpgroup's per-thread register cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetMaxNReg {
    /// Raise (`inc`, blocks until registers are free) or lower (`dec`) the cap.
    pub inc: bool,
    /// The new cap: 24 to 256 in steps of 8.
    pub count: u32,
}

impl SetMaxNReg {
    /// A checked `setmaxnreg`.
    pub fn new(inc: bool, count: u32) -> Self {
        assert!(
            count % 8 == 0 && (24..=256).contains(&count),
            "generator bug: setmaxnreg {count} (24 to 256 in steps of 8)"
        );
        SetMaxNReg { inc, count }
    }
}
