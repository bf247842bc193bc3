//! PTX IR layer: the instruction set flash-ptx emits.
//!
//! Every modifier is an enum and every `mma` form is a [`MmaKind`]: an instruction that
//! exists here is one ptxas accepts for the module's target. New families (wgmma,
//! mbarrier, TMA) are new variants, never changes to these.

pub use super::modifiers::*;
pub use super::operand::*;
pub use super::regs::regs_of;
pub use super::sm90::*;
use super::types::{Addr, B16, B32, B64, F32, Guard, Label, Operand, Pred, Reg};

/// One instruction. Its guard (if any) lives in [`Stmt::Inst`].
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// `op[.mods].ty d, src...`: arithmetic, logic and special functions.
    Alu {
        /// The operation.
        op: AluOp,
        /// The operand type.
        ty: Ty,
        /// Destination.
        d: AnyReg,
        /// Sources, [`AluOp::arity`] of them.
        src: Vec<AnyOperand>,
    },
    /// `setp.cmp.ty p, a, b`: p = (a cmp b).
    Setp {
        /// The comparison.
        cmp: Cmp,
        /// The operand type.
        ty: Ty,
        /// Destination predicate.
        p: Reg<Pred>,
        /// Left operand.
        a: AnyOperand,
        /// Right operand.
        b: AnyOperand,
    },
    /// `selp.ty d, a, b, p`: d = p ? a : b.
    Selp {
        /// The operand type.
        ty: Ty,
        /// Destination.
        d: AnyReg,
        /// Value when `p` holds.
        a: AnyOperand,
        /// Value otherwise.
        b: AnyOperand,
        /// The selecting predicate.
        p: Reg<Pred>,
    },
    /// `and.pred` / `or.pred d, a, b`.
    PredLogic {
        /// The operation.
        op: PredOp,
        /// Destination predicate.
        d: Reg<Pred>,
        /// Left operand.
        a: Reg<Pred>,
        /// Right operand.
        b: Reg<Pred>,
    },
    /// `vote.sync.any.pred d, a, 0xffffffff`: true in every lane when `a` is true in any
    /// lane of the (converged) warp.
    VoteAny {
        /// Destination predicate (warp-uniform).
        d: Reg<Pred>,
        /// This lane's vote.
        a: Reg<Pred>,
    },
    /// `mov.ty d, a`.
    Mov {
        /// The operand type.
        ty: Ty,
        /// Destination.
        d: AnyReg,
        /// Source register or immediate.
        a: AnyOperand,
    },
    /// `mov.u32 d, %special`.
    MovSpecial {
        /// Destination.
        d: Reg<B32>,
        /// The special register read.
        s: Special,
    },
    /// The 32-bit shared-window address of the dynamic shared memory symbol.
    MovSmemBase {
        /// Destination.
        d: Reg<B32>,
    },
    /// Integer and float conversions (`cvt[.rnd].dt.st`).
    Cvt {
        /// Destination type.
        d_ty: Ty,
        /// Source type.
        s_ty: Ty,
        /// Destination.
        d: AnyReg,
        /// Source.
        a: AnyReg,
    },
    /// Pack two f32 into one 16x2 word: `hi` to the high half, `lo` to the low half.
    CvtPack {
        /// The 16-bit format of both halves.
        fmt: HalfFmt,
        /// Destination word.
        d: Reg<B32>,
        /// The value of the high half.
        hi: Reg<F32>,
        /// The value of the low half.
        lo: Reg<F32>,
    },
    /// Split a 32-bit word into its halves (`mov.b32 {lo, hi}, a`).
    Unpack {
        /// Destination of the low half.
        lo: Reg<B16>,
        /// Destination of the high half.
        hi: Reg<B16>,
        /// Source word.
        a: Reg<B32>,
    },
    /// Generic to global address.
    CvtaGlobal {
        /// Destination (global address).
        d: Reg<B64>,
        /// Source (generic address).
        a: Reg<B64>,
    },
    /// The address of kernel parameter `param` in the parameter space
    /// (`mov.b64 d, param`); [`Inst::CvtaParam`] makes it generic.
    MovParamAddr {
        /// Destination (parameter-space address).
        d: Reg<B64>,
        /// The parameter's name.
        param: String,
    },
    /// Parameter-space to generic address (`cvta.param.u64`, PTX 7.7).
    CvtaParam {
        /// Destination (generic address).
        d: Reg<B64>,
        /// Source (parameter-space address).
        a: Reg<B64>,
    },
    /// `ld.param.ty d, [param]`: reads a kernel parameter.
    LdParam {
        /// The parameter's type.
        ty: Ty,
        /// Destination.
        d: AnyReg,
        /// The parameter's name.
        param: String,
    },
    /// `ld.space[.nc][.vN].ty {d...}, [addr]`.
    Ld {
        /// Global or shared memory.
        space: Space,
        /// Cache operator (global loads).
        cache: LdCache,
        /// Element type.
        ty: Ty,
        /// Destinations, 1, 2 or 4 ([`VecWidth`]).
        d: Vec<AnyReg>,
        /// Source address.
        addr: Addr,
    },
    /// `st.space[.vN].ty [addr], {src...}`.
    St {
        /// Global or shared memory.
        space: Space,
        /// Element type.
        ty: Ty,
        /// Values stored, 1, 2 or 4 ([`VecWidth`]).
        src: Vec<AnyReg>,
        /// Destination address.
        addr: Addr,
    },
    /// `cp.async` global -> shared; `src_size < size` zero-fills the rest.
    CpAsync {
        /// Cache level.
        cache: CpCache,
        /// Bytes copied.
        size: CpSize,
        /// Destination (shared memory).
        dst: Addr,
        /// Source (global memory).
        src: Addr,
        /// Bytes read from `src` when fewer than `size` (the rest is zero-filled).
        src_size: Option<Operand<B32>>,
    },
    /// `cp.async.commit_group`: closes the group of copies issued since the last commit.
    CpAsyncCommit,
    /// `cp.async.wait_group n`: waits until at most `pending` groups are in flight.
    CpAsyncWait {
        /// Groups that may still be in flight.
        pending: u32,
    },
    /// `ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16`: 8x8 matrices from shared memory
    /// into mma fragments.
    Ldmatrix {
        /// Number of matrices.
        num: LdmNum,
        /// Transpose each matrix while loading.
        trans: bool,
        /// Destinations, one register per matrix.
        d: Vec<Reg<B32>>,
        /// This lane's row address (lanes 8i..8i+8 address matrix i).
        addr: Addr,
    },
    /// `mma.sync`: D = A * B + C on tensor cores.
    Mma(Mma),
    /// `shfl.sync.mode.b32 d, a, lane, clamp, mask`: exchange a register between lanes.
    Shfl {
        /// Butterfly or indexed.
        mode: ShflMode,
        /// Destination.
        d: AnyReg,
        /// The value sent.
        a: AnyReg,
        /// Lane mask (`.bfly`) or source lane (`.idx`).
        lane: u32,
        /// The clamp value (`0x1f` for a whole warp).
        clamp: u32,
        /// Member mask of the participating lanes.
        mask: u32,
    },
    /// `bar.sync id` (CTA-wide) or `bar.sync id, threads` (the first `threads` threads,
    /// a multiple of 32, to arrive at barrier `id`: a named barrier of some warps).
    BarSync {
        /// The barrier number (0-15; 0 is the CTA-wide one), an immediate or a register.
        id: Operand<B32>,
        /// Threads taking part, or `None` for every thread of the CTA.
        threads: Option<u32>,
    },
    /// `bar.warp.sync mask`: the lanes of `mask` wait for each other; orders their
    /// memory accesses (shared memory written by one lane is visible to the others after).
    BarWarpSync {
        /// Member mask of the participating lanes.
        mask: u32,
    },
    /// `red.global.add.f32`: atomic add without return.
    RedAddF32 {
        /// Destination address (global).
        addr: Addr,
        /// The value added.
        v: Reg<F32>,
    },
    /// `atom[.acq_rel.gpu].global.add.u32 d, [addr], v`: atomically adds `v` at `addr`,
    /// `d` the value before; relaxed (at GPU scope) unless `acq_rel` (the earlier memory
    /// operations of the thread are ordered before it, the later ones after).
    AtomAddU32 {
        /// The value before the addition.
        d: Reg<B32>,
        /// The address (global).
        addr: Addr,
        /// The value added.
        v: Operand<B32>,
        /// Acquire-release at GPU scope.
        acq_rel: bool,
    },
    /// `bar.arrive id, threads`: arrives at named barrier `id` without waiting (the
    /// other side `bar.sync`s on it with the same thread count).
    BarArrive {
        /// The barrier number (1-15), an immediate or a register.
        id: Operand<B32>,
        /// Threads the barrier waits for (a multiple of 32).
        threads: u32,
    },
    /// `wgmma.*` (sm_90a): warpgroup MMA and its fences and groups.
    Wgmma(WgmmaOp),
    /// `mbarrier.*` (sm_90): transaction barriers in shared memory.
    Mbarrier(MbarrierOp),
    /// `cp.async.bulk.*` and `prefetch.tensormap` (sm_90): TMA.
    Bulk(BulkOp),
    /// `fence.proxy.async` / `fence.mbarrier_init` (sm_90).
    Fence(Fence),
    /// `setmaxnreg` (sm_90a): the warpgroup's register cap.
    SetMaxNReg(SetMaxNReg),
    /// `elect.sync _|p, 0xffffffff` (sm_90): `p` true in exactly one lane of the warp.
    Elect {
        /// Destination predicate.
        p: Reg<Pred>,
    },
    /// `stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16` (sm_90): the inverse of
    /// `ldmatrix`, same lane addressing and fragments.
    Stmatrix {
        /// Number of matrices.
        num: LdmNum,
        /// Transpose each matrix while storing.
        trans: bool,
        /// Sources, one register per matrix.
        src: Vec<Reg<B32>>,
        /// This lane's row address (lanes 8i..8i+8 address matrix i).
        addr: Addr,
    },
    /// `bra[.uni] target`.
    Bra {
        /// The label jumped to.
        target: Label,
        /// Every thread of the warp branches together (`.uni`).
        uni: bool,
    },
    /// `ret`: the thread exits.
    Ret,
    /// `trap`: aborts the kernel (the launch fails, the context is lost).
    Trap,
    /// A call of the driver's `__assertfail` (what device `assert` compiles to): the
    /// driver prints `message` with the failing block and thread at the next
    /// synchronisation. `message` is the symbol of a module-scope string of the entry.
    AssertFail {
        /// The string's symbol (`Entry::strings`).
        message: String,
    },
}

/// One line of a kernel body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// An instruction, optionally guarded (`@%p` / `@!%p`).
    Inst {
        /// The guard predicate, if any.
        guard: Option<Guard>,
        /// The instruction.
        inst: Inst,
    },
    /// A label line (`Ln:`).
    Label(Label),
    /// A comment line.
    Comment(String),
}

impl Inst {
    /// Whether the instruction needs an sm_90 target or newer (every Hopper family and
    /// `stmatrix`); an sm_80 module holding one is a generator bug.
    pub fn needs_sm90(&self) -> bool {
        matches!(
            self,
            Inst::Wgmma(_)
                | Inst::Mbarrier(_)
                | Inst::Bulk(_)
                | Inst::Fence(_)
                | Inst::SetMaxNReg(_)
                | Inst::Elect { .. }
                | Inst::Stmatrix { .. }
        )
    }
}
