//! PTX IR layer: the builder's parameter, memory, tensor-core, warp and barrier instructions.

use super::Builder;
use crate::ptx::inst::{
    AnyReg, CpCache, CpSize, HalfFmt, Inst, LdCache, LdmNum, Mma, MmaKind, ShflMode, Space, Ty,
};
use crate::ptx::module::{Param, ParamTy};
use crate::ptx::types::{Addr, B32, B64, F32, Kind, Operand, Reg, RegClass};

impl Builder {
    /// `ld.param`: loads scalar kernel parameter `p` into a fresh register of its class
    /// (`ld.param.u64 %rd0, [q];`). A [`ParamTy::Bytes`] parameter is a generator bug:
    /// take its address with [`Builder::param_addr`].
    pub fn ld_param<T: Copy + Into<ParamTy>>(&mut self, p: &Param<T>) -> AnyReg {
        let ty = match p.param_ty() {
            ParamTy::Scalar(ty) => ty,
            ParamTy::Bytes { align, size } => panic!(
                "generator bug: ld_param of {}, {size} bytes aligned to {align}: \
                 use param_addr for a by-value struct",
                p.name
            ),
        };
        let d: AnyReg = match ty.class() {
            RegClass::Pred | RegClass::B16 => panic!("generator bug: {ty:?} parameter"),
            RegClass::B32 => self.reg::<B32>().into(),
            RegClass::F32 => self.reg::<F32>().into(),
            RegClass::B64 => self.reg::<B64>().into(),
        };
        self.push(Inst::LdParam {
            ty,
            d,
            param: p.name.clone(),
        });
        d
    }

    /// The generic address of kernel parameter `p` (a by-value struct such as a
    /// `CUtensorMap`), in one fresh register, the pair nvcc emits:
    ///
    /// ```text
    /// mov.b64 %rd0, tmap;
    /// cvta.param.u64 %rd0, %rd0;
    /// ```
    ///
    /// `cvta.param` needs PTX ISA 7.7: a module using it must declare `.version 7.7` or
    /// later (ptxas rejects it in a `.version 7.0` module).
    pub fn param_addr<T: Copy + Into<ParamTy>>(&mut self, p: &Param<T>) -> Reg<B64> {
        let d = self.reg();
        self.push(Inst::MovParamAddr {
            d,
            param: p.name.clone(),
        });
        self.push(Inst::CvtaParam { d, a: d });
        d
    }

    /// `cvta.to.global.u64`: a generic address as a global one.
    pub fn cvta_global(&mut self, a: Reg<B64>) -> Reg<B64> {
        let d = self.reg();
        self.push(Inst::CvtaGlobal { d, a });
        d
    }

    /// Loads `N` 32-bit words (`.v2`/`.v4` when N > 1) of type `ty` (B32 or F32 class).
    pub fn ld<K: Kind, const N: usize>(
        &mut self,
        space: Space,
        cache: LdCache,
        ty: Ty,
        addr: Addr,
    ) -> [Reg<K>; N]
    where
        AnyReg: From<Reg<K>>,
    {
        assert_eq!(
            ty.class(),
            K::CLASS,
            "generator bug: ld type/class mismatch"
        );
        let d: [Reg<K>; N] = std::array::from_fn(|_| self.reg::<K>());
        self.ld_into(space, cache, ty, addr, &d);
        d
    }

    /// Loads into existing registers (`.v2`/`.v4` when more than one): for guarded loads
    /// whose registers hold a default when the guard is off.
    pub fn ld_into<K: Kind>(
        &mut self,
        space: Space,
        cache: LdCache,
        ty: Ty,
        addr: Addr,
        d: &[Reg<K>],
    ) where
        AnyReg: From<Reg<K>>,
    {
        assert_eq!(
            ty.class(),
            K::CLASS,
            "generator bug: ld type/class mismatch"
        );
        self.push(Inst::Ld {
            space,
            cache,
            ty,
            d: d.iter().map(|r| (*r).into()).collect(),
            addr,
        });
    }

    /// Stores `src` (`.v2`/`.v4` when more than one).
    pub fn st<K: Kind>(&mut self, space: Space, ty: Ty, addr: Addr, src: &[Reg<K>])
    where
        AnyReg: From<Reg<K>>,
    {
        assert_eq!(
            ty.class(),
            K::CLASS,
            "generator bug: st type/class mismatch"
        );
        self.push(Inst::St {
            space,
            ty,
            src: src.iter().map(|r| (*r).into()).collect(),
            addr,
        });
    }

    /// `cp.async` of `size` bytes; with `src_size`, bytes past it are zero-filled.
    pub fn cp_async(&mut self, size: CpSize, dst: Addr, src: Addr, src_size: Option<Operand<B32>>) {
        let cache = if size == CpSize::B16 {
            CpCache::Cg
        } else {
            CpCache::Ca
        };
        self.push(Inst::CpAsync {
            cache,
            size,
            dst,
            src,
            src_size,
        });
    }
    /// `cp.async.commit_group`: closes the group of `cp.async` issued since the last commit.
    pub fn cp_async_commit(&mut self) {
        self.push(Inst::CpAsyncCommit);
    }
    /// Waits until at most `pending` committed groups are in flight.
    pub fn cp_async_wait(&mut self, pending: u32) {
        self.push(Inst::CpAsyncWait { pending });
    }

    /// `ldmatrix` of N 8x8 b16 matrices (N = 1, 2 or 4).
    pub fn ldmatrix<const N: usize>(&mut self, trans: bool, addr: Addr) -> [Reg<B32>; N] {
        let num = LdmNum::of(N);
        let d: [Reg<B32>; N] = std::array::from_fn(|_| self.reg::<B32>());
        self.push(Inst::Ldmatrix {
            num,
            trans,
            d: d.to_vec(),
            addr,
        });
        d
    }

    /// `acc += a * b` with one m16n8k16 tensor-core instruction.
    pub fn mma(&mut self, fmt: HalfFmt, acc: [Reg<F32>; 4], a: [Reg<B32>; 4], b: [Reg<B32>; 2]) {
        self.push(Inst::Mma(Mma {
            kind: MmaKind::M16N8K16F32(fmt),
            d: acc,
            a,
            b,
            c: acc,
        }));
    }

    /// Butterfly shuffle of an f32 across lanes `lane ^ mask` (full warp).
    pub fn shfl_bfly_f32(&mut self, a: Reg<F32>, lane_mask: u32) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(Inst::Shfl {
            mode: ShflMode::Bfly,
            d: d.into(),
            a: a.into(),
            lane: lane_mask,
            clamp: 0x1f,
            mask: u32::MAX,
        });
        d
    }

    /// Indexed shuffle inside aligned segments of `width` lanes (`shfl.sync.idx.b32` with
    /// segment mask `32 - width`): every lane gets `a` of lane `src` of its segment.
    pub fn shfl_idx_seg_b32(&mut self, a: Reg<B32>, src: u32, width: u32) -> Reg<B32> {
        assert!(
            width.is_power_of_two() && width <= 32 && src < width,
            "generator bug: shuffle from lane {src} of segments of {width}"
        );
        let d = self.reg::<B32>();
        self.push(Inst::Shfl {
            mode: ShflMode::Idx,
            d: d.into(),
            a: a.into(),
            lane: src,
            clamp: ((32 - width) << 8) | 0x1f,
            mask: u32::MAX,
        });
        d
    }

    /// Indexed shuffle of an f32: every lane gets lane `src`'s `a` (full warp).
    pub fn shfl_idx_f32(&mut self, a: Reg<F32>, src: u32) -> Reg<F32> {
        assert!(src < 32, "generator bug: shuffle from lane {src}");
        let d = self.reg::<F32>();
        self.push(Inst::Shfl {
            mode: ShflMode::Idx,
            d: d.into(),
            a: a.into(),
            lane: src,
            clamp: 0x1f,
            mask: u32::MAX,
        });
        d
    }

    /// `bar.sync 0`: every thread of the CTA waits here.
    pub fn bar_sync(&mut self) {
        self.push(Inst::BarSync {
            id: Operand::Imm(0),
            threads: None,
        });
    }

    /// `bar.sync id, threads`: a named barrier that the `threads` threads of some warps
    /// (a multiple of 32) wait at together; `id` (a register here: it differs between the
    /// groups of warps) must be 1-15, 0 being the CTA-wide [`bar_sync`]'s.
    ///
    /// [`bar_sync`]: Builder::bar_sync
    pub fn bar_sync_named(&mut self, id: Reg<B32>, threads: u32) {
        named_barrier_threads(threads);
        self.push(Inst::BarSync {
            id: Operand::Reg(id),
            threads: Some(threads),
        });
    }

    /// `bar.warp.sync 0xffffffff`: every lane of the warp waits here; shared-memory
    /// writes of one lane before it are visible to the others after it.
    pub fn bar_warp_sync(&mut self) {
        self.push(Inst::BarWarpSync { mask: u32::MAX });
    }

    /// `red.global.add.f32`: atomically adds `v` at `addr` (no return value).
    pub fn red_add_f32(&mut self, addr: Addr, v: Reg<F32>) {
        self.push(Inst::RedAddF32 { addr, v });
    }

    /// `atom[.acq_rel.gpu].global.add.u32`: atomically adds `v` at the global `addr`;
    /// returns the value before.
    pub fn atom_add_u32(
        &mut self,
        addr: Addr,
        v: impl Into<Operand<B32>>,
        acq_rel: bool,
    ) -> Reg<B32> {
        let d = self.reg();
        self.push(Inst::AtomAddU32 {
            d,
            addr,
            v: v.into(),
            acq_rel,
        });
        d
    }
}

/// Checks a named barrier's thread count: a non-zero multiple of 32 (whole warps).
pub(super) fn named_barrier_threads(threads: u32) {
    assert!(
        threads % 32 == 0 && threads > 0,
        "generator bug: named barrier of {threads} threads"
    );
}
