//! PTX IR layer: the instruction set flash-ptx emits.
//!
//! Every modifier is an enum and every `mma` form is a [`MmaKind`]: an instruction that
//! exists here is one ptxas accepts for the module's target. New families (wgmma,
//! mbarrier, TMA) are new variants, never changes to these.

use super::types::{Addr, B16, B32, B64, F32, Guard, Kind, Label, Operand, Pred, Reg, RegClass};

/// The scalar type suffix of an instruction (`.u32`, `.f32`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Pred,
    B16,
    B32,
    U32,
    S32,
    F32,
    F16,
    B64,
    U64,
    S64,
}

impl Ty {
    /// The register class holding a value of this type.
    pub fn class(self) -> RegClass {
        match self {
            Ty::Pred => RegClass::Pred,
            Ty::B16 | Ty::F16 => RegClass::B16,
            Ty::B32 | Ty::U32 | Ty::S32 => RegClass::B32,
            Ty::F32 => RegClass::F32,
            Ty::B64 | Ty::U64 | Ty::S64 => RegClass::B64,
        }
    }
}

/// A register of any class, for instructions generic over their data type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyReg {
    Pred(Reg<Pred>),
    B32(Reg<B32>),
    F32(Reg<F32>),
    B64(Reg<B64>),
    B16(Reg<B16>),
}

/// An operand of any class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyOperand {
    Reg(AnyReg),
    Int(i64),
    F32(f32),
}

macro_rules! any_conv {
    ($($k:ident),*) => {$(
        impl From<Reg<$k>> for AnyReg {
            fn from(r: Reg<$k>) -> Self { AnyReg::$k(r) }
        }
        impl From<Reg<$k>> for AnyOperand {
            fn from(r: Reg<$k>) -> Self { AnyOperand::Reg(AnyReg::$k(r)) }
        }
    )*};
}
any_conv!(Pred, B32, F32, B64, B16);

impl From<Operand<B32>> for AnyOperand {
    fn from(o: Operand<B32>) -> Self {
        match o {
            Operand::Reg(r) => r.into(),
            Operand::Imm(v) => AnyOperand::Int(v),
        }
    }
}
impl From<Operand<B64>> for AnyOperand {
    fn from(o: Operand<B64>) -> Self {
        match o {
            Operand::Reg(r) => r.into(),
            Operand::Imm(v) => AnyOperand::Int(v),
        }
    }
}
impl From<Operand<F32>> for AnyOperand {
    fn from(o: Operand<F32>) -> Self {
        match o {
            Operand::Reg(r) => r.into(),
            Operand::Imm(v) => AnyOperand::F32(v),
        }
    }
}

impl AnyReg {
    pub fn class(self) -> RegClass {
        match self {
            AnyReg::Pred(_) => RegClass::Pred,
            AnyReg::B32(_) => RegClass::B32,
            AnyReg::F32(_) => RegClass::F32,
            AnyReg::B64(_) => RegClass::B64,
            AnyReg::B16(_) => RegClass::B16,
        }
    }
    pub fn id(self) -> u32 {
        match self {
            AnyReg::Pred(r) => r.id(),
            AnyReg::B32(r) => r.id(),
            AnyReg::F32(r) => r.id(),
            AnyReg::B64(r) => r.id(),
            AnyReg::B16(r) => r.id(),
        }
    }
}

/// Arithmetic, logic and special-function operations (`op[.mods].ty d, a, b[, c]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    Add,
    Sub,
    /// Float multiply (`mul.f32`).
    Mul,
    /// Low half of an integer product (`mul.lo`).
    MulLo,
    /// Full product into a register twice as wide (`mul.wide`).
    MulWide,
    MadLo,
    MadWide,
    /// Fused multiply-add, round to nearest (`fma.rn`).
    Fma,
    Min,
    Max,
    Neg,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Div,
    Rem,
    /// `ex2.approx.ftz`: 2^a.
    Ex2,
    /// `lg2.approx.ftz`: log2(a).
    Lg2,
    /// `rcp.approx.ftz`: 1/a.
    Rcp,
}

impl AluOp {
    /// Number of source operands.
    pub fn arity(self) -> usize {
        match self {
            AluOp::Neg | AluOp::Not | AluOp::Ex2 | AluOp::Lg2 | AluOp::Rcp => 1,
            AluOp::MadLo | AluOp::MadWide | AluOp::Fma => 3,
            _ => 2,
        }
    }
}

/// Comparison of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Boolean operations on predicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PredOp {
    And,
    Or,
}

/// Special registers read with `mov.u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    TidX,
    CtaIdX,
    CtaIdY,
    CtaIdZ,
    NCtaIdX,
    NCtaIdY,
    LaneId,
}

/// State spaces of loads and stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    Shared,
}

/// Cache operator of a global load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LdCache {
    /// Default (`.ca`), printed without a qualifier.
    Default,
    /// Read-only, non-coherent path (`.nc`): data this kernel never writes.
    NonCoherent,
}

/// Vector width of a load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VecWidth {
    V1,
    V2,
    V4,
}

impl VecWidth {
    pub fn of(n: usize) -> VecWidth {
        match n {
            1 => VecWidth::V1,
            2 => VecWidth::V2,
            4 => VecWidth::V4,
            _ => panic!("generator bug: vector width {n} is not 1, 2 or 4"),
        }
    }
}

/// Cache level of `cp.async`: `.ca` (L1+L2, 4/8/16 bytes) or `.cg` (L2 only, 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpCache {
    Ca,
    Cg,
}

/// Copy size of `cp.async`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpSize {
    B4,
    B8,
    B16,
}

impl CpSize {
    pub fn bytes(self) -> u32 {
        match self {
            CpSize::B4 => 4,
            CpSize::B8 => 8,
            CpSize::B16 => 16,
        }
    }
}

/// Number of 8x8 matrices an `ldmatrix` moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LdmNum {
    X1,
    X2,
    X4,
}

impl LdmNum {
    pub fn count(self) -> usize {
        match self {
            LdmNum::X1 => 1,
            LdmNum::X2 => 2,
            LdmNum::X4 => 4,
        }
    }
}

/// The 16-bit input formats of tensor-core instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HalfFmt {
    F16,
    Bf16,
}

/// The legal `mma.sync` forms flash-ptx emits: m16n8k16, row.col, f32 accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmaKind {
    M16N8K16F32(HalfFmt),
}

/// `mma.sync.aligned`: D = A * B + C with the fragment shapes of [`MmaKind`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mma {
    pub kind: MmaKind,
    pub d: [Reg<F32>; 4],
    pub a: [Reg<B32>; 4],
    pub b: [Reg<B32>; 2],
    pub c: [Reg<F32>; 4],
}

/// Warp shuffle modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShflMode {
    Bfly,
    Idx,
}

/// One instruction. Its guard (if any) lives in [`Stmt::Inst`].
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    Alu {
        op: AluOp,
        ty: Ty,
        d: AnyReg,
        src: Vec<AnyOperand>,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        p: Reg<Pred>,
        a: AnyOperand,
        b: AnyOperand,
    },
    Selp {
        ty: Ty,
        d: AnyReg,
        a: AnyOperand,
        b: AnyOperand,
        p: Reg<Pred>,
    },
    PredLogic {
        op: PredOp,
        d: Reg<Pred>,
        a: Reg<Pred>,
        b: Reg<Pred>,
    },
    Mov {
        ty: Ty,
        d: AnyReg,
        a: AnyOperand,
    },
    MovSpecial {
        d: Reg<B32>,
        s: Special,
    },
    /// The 32-bit shared-window address of the dynamic shared memory symbol.
    MovSmemBase {
        d: Reg<B32>,
    },
    /// Integer and float conversions (`cvt[.rnd].dt.st`).
    Cvt {
        d_ty: Ty,
        s_ty: Ty,
        d: AnyReg,
        a: AnyReg,
    },
    /// Pack two f32 into one 16x2 word: `hi` to the high half, `lo` to the low half.
    CvtPack {
        fmt: HalfFmt,
        d: Reg<B32>,
        hi: Reg<F32>,
        lo: Reg<F32>,
    },
    /// Split a 32-bit word into its halves (`mov.b32 {lo, hi}, a`).
    Unpack {
        lo: Reg<B16>,
        hi: Reg<B16>,
        a: Reg<B32>,
    },
    /// Generic to global address.
    CvtaGlobal {
        d: Reg<B64>,
        a: Reg<B64>,
    },
    LdParam {
        ty: Ty,
        d: AnyReg,
        param: String,
    },
    Ld {
        space: Space,
        cache: LdCache,
        ty: Ty,
        d: Vec<AnyReg>,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        src: Vec<AnyReg>,
        addr: Addr,
    },
    /// `cp.async` global -> shared; `src_size < size` zero-fills the rest.
    CpAsync {
        cache: CpCache,
        size: CpSize,
        dst: Addr,
        src: Addr,
        src_size: Option<Operand<B32>>,
    },
    CpAsyncCommit,
    CpAsyncWait {
        pending: u32,
    },
    Ldmatrix {
        num: LdmNum,
        trans: bool,
        d: Vec<Reg<B32>>,
        addr: Addr,
    },
    Mma(Mma),
    Shfl {
        mode: ShflMode,
        d: AnyReg,
        a: AnyReg,
        lane: u32,
        clamp: u32,
        mask: u32,
    },
    BarSync {
        id: u32,
    },
    /// `red.global.add.f32`: atomic add without return.
    RedAddF32 {
        addr: Addr,
        v: Reg<F32>,
    },
    Bra {
        target: Label,
        uni: bool,
    },
    Ret,
}

/// One line of a kernel body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Inst { guard: Option<Guard>, inst: Inst },
    Label(Label),
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
        Inst::CvtaGlobal { d, a } => out.extend::<[AnyReg; 2]>([(*d).into(), (*a).into()]),
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
        Inst::CpAsyncCommit | Inst::CpAsyncWait { .. } | Inst::BarSync { .. } => {}
        Inst::Bra { .. } | Inst::Ret => {}
    }
    out
}

/// A kind marker's class, for generic code over [`Kind`].
pub fn class_of<K: Kind>() -> RegClass {
    K::CLASS
}
