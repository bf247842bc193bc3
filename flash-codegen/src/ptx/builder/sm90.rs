//! PTX IR layer: the builder's Hopper instructions (sm_90 / sm_90a): warpgroup MMA,
//! mbarriers, TMA copies, proxy fences, register reallocation, `elect.sync`, `stmatrix`
//! and named-barrier arrivals. A module holding any of them must target sm_90a
//! ([`Target::Sm90a`](crate::ptx::Target)); the printer refuses it otherwise.

use super::Builder;
use crate::ptx::inst::{Cmp, HalfFmt, Inst, LdmNum};
use crate::ptx::sm90::{
    BulkOp, Fence, MbarrierOp, ScaleD, SetMaxNReg, TensorCoords, Wgmma, WgmmaA, WgmmaOp,
};
use crate::ptx::types::{Addr, B32, B64, F32, Operand, Pred, Reg};

/// Checks that `a` is a shared-memory address aligned to `align` bytes in its constant
/// part (the register's alignment is the caller's: tile offsets are static).
fn shared(a: Addr, what: &str, align: i32) -> Addr {
    match a {
        Addr::Shared(_, off) if off % align == 0 => a,
        other => panic!("generator bug: {what} at {other:?} (shared, {align}-byte aligned)"),
    }
}

impl Builder {
    /// `wgmma.fence.sync.aligned`: orders this warpgroup's register writes before the
    /// `wgmma`s that read them (accumulators, A fragments).
    pub fn wgmma_fence(&mut self) {
        self.push(Inst::Wgmma(WgmmaOp::Fence));
    }

    /// `wgmma.commit_group.sync.aligned`.
    pub fn wgmma_commit(&mut self) {
        self.push(Inst::Wgmma(WgmmaOp::Commit));
    }

    /// `wgmma.wait_group.sync.aligned pending`: at most `pending` groups stay in flight.
    pub fn wgmma_wait(&mut self, pending: u32) {
        self.push(Inst::Wgmma(WgmmaOp::Wait(pending)));
    }

    /// One `wgmma` k-step, SS form: `acc (+)= A(desc a) * B(desc b)`; `trans_a` /
    /// `trans_b` when the tile is MN-major. `acc` holds N / 2 registers.
    #[allow(clippy::too_many_arguments)]
    pub fn wgmma_ss(
        &mut self,
        fmt: HalfFmt,
        acc: &[Reg<F32>],
        a: Reg<B64>,
        trans_a: bool,
        b: Reg<B64>,
        trans_b: bool,
        scale_d: ScaleD,
    ) {
        let a = WgmmaA::Desc {
            desc: a,
            trans: trans_a,
        };
        let m = Wgmma::new(fmt, acc.to_vec(), a, b, trans_b, scale_d);
        self.push(Inst::Wgmma(WgmmaOp::Mma(m)));
    }

    /// One `wgmma` k-step, RS form: `acc (+)= A(registers a) * B(desc b)`. The registers
    /// must not change until a `wgmma_wait` covers this product.
    pub fn wgmma_rs(
        &mut self,
        fmt: HalfFmt,
        acc: &[Reg<F32>],
        a: [Reg<B32>; 4],
        b: Reg<B64>,
        trans_b: bool,
        scale_d: ScaleD,
    ) {
        let m = Wgmma::new(fmt, acc.to_vec(), WgmmaA::Regs(a), b, trans_b, scale_d);
        self.push(Inst::Wgmma(WgmmaOp::Mma(m)));
    }

    /// `mbarrier.init [bar], count` (bar: shared, 8-byte aligned).
    pub fn mbarrier_init(&mut self, bar: Addr, count: u32) {
        let bar = shared(bar, "mbarrier", 8);
        assert!(count > 0, "generator bug: an mbarrier of 0 arrivals");
        self.push(Inst::Mbarrier(MbarrierOp::Init {
            bar,
            count: Operand::Imm(count.into()),
        }));
    }

    /// `mbarrier.arrive _, [bar]`.
    pub fn mbarrier_arrive(&mut self, bar: Addr) {
        let bar = shared(bar, "mbarrier", 8);
        self.push(Inst::Mbarrier(MbarrierOp::Arrive { bar }));
    }

    /// `mbarrier.arrive.expect_tx _, [bar], bytes`: the copies of this phase will
    /// complete `bytes` (whole boxes, out-of-bounds parts included).
    pub fn mbarrier_arrive_expect_tx(&mut self, bar: Addr, bytes: u32) {
        let bar = shared(bar, "mbarrier", 8);
        assert!(
            bytes > 0 && bytes < (1 << 20),
            "generator bug: expect_tx {bytes} bytes (1 to 2^20 - 1)"
        );
        self.push(Inst::Mbarrier(MbarrierOp::ArriveExpectTx {
            bar,
            bytes: Operand::Imm(bytes.into()),
        }));
    }

    /// Waits until the phase of parity `parity` of `bar` (called `name` in messages)
    /// completes:
    ///
    /// ```text
    /// WAIT:
    ///     mbarrier.try_wait.parity.shared::cta.b64 %p, [bar], parity;
    ///     @!%p bra WAIT;
    /// ```
    ///
    /// Under [`Builder::bound_waits`] the loop counts its spins and, past the bound, fails
    /// with "flash-ptx: mbarrier `name` timed out" (`__assertfail`, then `trap`).
    pub fn mbarrier_wait(&mut self, bar: Addr, parity: impl Into<Operand<B32>>, name: &str) {
        let bar = shared(bar, "mbarrier", 8);
        let parity = parity.into();
        let top = self.label();
        let bounded = self.wait_bound.map(|bound| (bound, self.mov(0u32)));
        self.place(top);
        let p = self.reg::<Pred>();
        self.push(Inst::Mbarrier(MbarrierOp::TryWaitParity { p, bar, parity }));
        let Some((bound, spins)) = bounded else {
            self.bra_if(p, true, top, false);
            return;
        };
        let done = self.label();
        self.bra_if(p, false, done, false);
        let n = self.add_u32(spins, 1u32);
        self.assign(spins, n);
        let more = self.setp_u32(Cmp::Lt, spins, bound);
        self.bra_if(more, false, top, false);
        self.assert_fail(&format!(
            "flash-ptx: mbarrier `{name}` timed out ({bound} waits)"
        ));
        self.place(done);
    }

    /// One TMA box load into `dst` completing on `bar` (issued by one thread; its bytes
    /// announced with [`Builder::mbarrier_arrive_expect_tx`]).
    pub fn tma_load(&mut self, dst: Addr, tmap: Reg<B64>, coords: Vec<Operand<B32>>, bar: Addr) {
        let dst = shared(dst, "TMA destination", 128);
        let bar = shared(bar, "mbarrier", 8);
        let src = TensorCoords::new(tmap, coords);
        self.push(Inst::Bulk(BulkOp::TensorLoad { dst, src, bar }));
    }

    /// One TMA box store from `src` (after `fence.proxy.async` and a barrier over the
    /// threads that wrote it).
    pub fn tma_store(&mut self, tmap: Reg<B64>, coords: Vec<Operand<B32>>, src: Addr) {
        let src = shared(src, "TMA source", 128);
        let dst = TensorCoords::new(tmap, coords);
        self.push(Inst::Bulk(BulkOp::TensorStore { dst, src }));
    }

    /// `cp.async.bulk.commit_group`.
    pub fn bulk_commit(&mut self) {
        self.push(Inst::Bulk(BulkOp::Commit));
    }

    /// `cp.async.bulk.wait_group[.read] pending`.
    pub fn bulk_wait(&mut self, pending: u32, read: bool) {
        self.push(Inst::Bulk(BulkOp::Wait { pending, read }));
    }

    /// `prefetch.tensormap [tmap]`.
    pub fn prefetch_tensormap(&mut self, tmap: Reg<B64>) {
        self.push(Inst::Bulk(BulkOp::PrefetchTensormap { tmap }));
    }

    /// `fence.proxy.async.shared::cta`.
    pub fn fence_proxy_async(&mut self) {
        self.push(Inst::Fence(Fence::ProxyAsyncShared));
    }

    /// `fence.mbarrier_init.release.cluster`.
    pub fn fence_mbarrier_init(&mut self) {
        self.push(Inst::Fence(Fence::MbarrierInit));
    }

    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 count` (every warp of the warpgroup).
    pub fn setmaxnreg(&mut self, inc: bool, count: u32) {
        self.push(Inst::SetMaxNReg(SetMaxNReg::new(inc, count)));
    }

    /// `elect.sync _|p, 0xffffffff`: a predicate true in one lane of the (converged) warp.
    pub fn elect_one(&mut self) -> Reg<Pred> {
        let p = self.reg();
        self.push(Inst::Elect { p });
        p
    }

    /// `stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 [addr], {src}`.
    pub fn stmatrix<const N: usize>(&mut self, trans: bool, addr: Addr, src: [Reg<B32>; N]) {
        let addr = shared(addr, "stmatrix row", 16);
        self.push(Inst::Stmatrix {
            num: LdmNum::of(N),
            trans,
            src: src.to_vec(),
            addr,
        });
    }

    /// `bar.arrive id, threads`: arrives at named barrier `id` (1-15) without waiting.
    pub fn bar_arrive(&mut self, id: impl Into<Operand<B32>>, threads: u32) {
        super::mem::named_barrier_threads(threads);
        self.push(Inst::BarArrive {
            id: id.into(),
            threads,
        });
    }
}
