//! PTX IR layer: the instruction set flash-ptx emits.
//!
//! Every modifier is an enum and every `mma` form is a [`MmaKind`]: an instruction that
//! exists here is one ptxas accepts for the module's target. New families (wgmma,
//! mbarrier, TMA) are new variants, never changes to these.

pub use super::modifiers::*;
pub use super::operand::*;
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
    /// `bra[.uni] target`.
    Bra {
        /// The label jumped to.
        target: Label,
        /// Every thread of the warp branches together (`.uni`).
        uni: bool,
    },
    /// `ret`: the thread exits.
    Ret,
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

/// Registers an instruction reads and writes (for checks such as "every register used
/// is declared").
pub fn regs_of(inst: &Inst) -> Vec<AnyReg> {
    fn ops(v: &[AnyOperand]) -> impl Iterator<Item = AnyReg> + '_ {
        v.iter().filter_map(|o| match o {
            AnyOperand::Reg(r) => Some(*r),
            _ => None,
        })
    }
    fn addr(a: &Addr) -> AnyReg {
        match a {
            Addr::Global(r, _) => (*r).into(),
            Addr::Shared(r, _) => (*r).into(),
        }
    }
    let mut out: Vec<AnyReg> = Vec::new();
    match inst {
        Inst::Alu { d, src, .. } => {
            out.push(*d);
            out.extend(ops(src));
        }
        Inst::Setp { p, a, b, .. } => {
            out.push(AnyReg::from(*p));
            out.extend(ops(&[*a, *b]));
        }
        Inst::Selp { d, a, b, p, .. } => {
            out.extend::<[AnyReg; 2]>([*d, (*p).into()]);
            out.extend(ops(&[*a, *b]));
        }
        Inst::PredLogic { d, a, b, .. } => {
            out.extend::<[AnyReg; 3]>([(*d).into(), (*a).into(), (*b).into()])
        }
        Inst::VoteAny { d, a } => out.extend::<[AnyReg; 2]>([(*d).into(), (*a).into()]),
        Inst::Mov { d, a, .. } => {
            out.push(*d);
            out.extend(ops(&[*a]));
        }
        Inst::MovSpecial { d, .. } | Inst::MovSmemBase { d } => out.push((*d).into()),
        Inst::Cvt { d, a, .. } => out.extend([*d, *a]),
        Inst::CvtPack { d, hi, lo, .. } => {
            out.extend::<[AnyReg; 3]>([(*d).into(), (*hi).into(), (*lo).into()])
        }
        Inst::Unpack { lo, hi, a } => {
            out.extend::<[AnyReg; 3]>([(*lo).into(), (*hi).into(), (*a).into()])
        }
        Inst::CvtaGlobal { d, a } | Inst::CvtaParam { d, a } => {
            out.extend::<[AnyReg; 2]>([(*d).into(), (*a).into()])
        }
        Inst::MovParamAddr { d, .. } => out.push((*d).into()),
        Inst::LdParam { d, .. } => out.push(*d),
        Inst::Ld { d, addr: a, .. } => {
            out.extend(d.iter().copied());
            out.push(addr(a));
        }
        Inst::St { src, addr: a, .. } => {
            out.extend(src.iter().copied());
            out.push(addr(a));
        }
        Inst::CpAsync {
            dst, src, src_size, ..
        } => {
            out.extend([addr(dst), addr(src)]);
            if let Some(Operand::Reg(r)) = src_size {
                out.push((*r).into());
            }
        }
        Inst::Ldmatrix { d, addr: a, .. } => {
            out.extend(d.iter().map(|r| AnyReg::from(*r)));
            out.push(addr(a));
        }
        Inst::Mma(m) => {
            out.extend(m.d.iter().chain(&m.c).map(|r| AnyReg::from(*r)));
            out.extend(m.a.iter().chain(&m.b).map(|r| AnyReg::from(*r)));
        }
        Inst::Shfl { d, a, .. } => out.extend([*d, *a]),
        Inst::RedAddF32 { addr: a, v } => out.extend::<[AnyReg; 2]>([addr(a), (*v).into()]),
        Inst::BarSync { id, .. } => {
            if let Operand::Reg(r) = id {
                out.push((*r).into());
            }
        }
        Inst::CpAsyncCommit | Inst::CpAsyncWait { .. } | Inst::BarWarpSync { .. } => {}
        Inst::Bra { .. } | Inst::Ret => {}
    }
    out
}
