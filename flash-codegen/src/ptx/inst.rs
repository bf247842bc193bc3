//! PTX IR layer: the instruction set flash-ptx emits.
//!
//! Every modifier is an enum and every `mma` form is a [`MmaKind`]: an instruction that
//! exists here is one ptxas accepts for the module's target. New families (wgmma,
//! mbarrier, TMA) are new variants, never changes to these.

use super::types::{Addr, B16, B32, B64, F32, Guard, Kind, Label, Operand, Pred, Reg, RegClass};

/// The scalar type suffix of an instruction (`.u32`, `.f32`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// Predicate (`.pred`).
    Pred,
    /// 16 untyped bits (`.b16`).
    B16,
    /// 32 untyped bits (`.b32`).
    B32,
    /// Unsigned 32-bit integer (`.u32`).
    U32,
    /// Signed 32-bit integer (`.s32`).
    S32,
    /// 32-bit float (`.f32`).
    F32,
    /// Half-precision float (`.f16`).
    F16,
    /// 64 untyped bits (`.b64`).
    B64,
    /// Unsigned 64-bit integer (`.u64`).
    U64,
    /// Signed 64-bit integer (`.s64`).
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
    /// A predicate register.
    Pred(Reg<Pred>),
    /// A 32-bit register.
    B32(Reg<B32>),
    /// An f32 register.
    F32(Reg<F32>),
    /// A 64-bit register.
    B64(Reg<B64>),
    /// A 16-bit register.
    B16(Reg<B16>),
}

/// An operand of any class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyOperand {
    /// A register.
    Reg(AnyReg),
    /// An integer immediate.
    Int(i64),
    /// An f32 immediate (printed as a hex float).
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
    /// The register's class.
    pub fn class(self) -> RegClass {
        match self {
            AnyReg::Pred(_) => RegClass::Pred,
            AnyReg::B32(_) => RegClass::B32,
            AnyReg::F32(_) => RegClass::F32,
            AnyReg::B64(_) => RegClass::B64,
            AnyReg::B16(_) => RegClass::B16,
        }
    }
    /// The register's number within its class.
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
    /// `add`: a + b.
    Add,
    /// `sub`: a - b.
    Sub,
    /// Float multiply (`mul.f32`).
    Mul,
    /// Low half of an integer product (`mul.lo`).
    MulLo,
    /// Full product into a register twice as wide (`mul.wide`).
    MulWide,
    /// `mad.lo`: low half of a * b, plus c.
    MadLo,
    /// `mad.wide`: full a * b (twice as wide), plus c.
    MadWide,
    /// Fused multiply-add, round to nearest (`fma.rn`).
    Fma,
    /// `min`.
    Min,
    /// `max`.
    Max,
    /// `neg`: -a.
    Neg,
    /// `and` (bitwise).
    And,
    /// `or` (bitwise).
    Or,
    /// `xor` (bitwise).
    Xor,
    /// `not` (bitwise).
    Not,
    /// `shl`: shift left.
    Shl,
    /// `shr`: shift right (logical for unsigned, arithmetic for signed types).
    Shr,
    /// `div`: integer quotient.
    Div,
    /// `rem`: integer remainder.
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
    /// `eq`: equal.
    Eq,
    /// `ne`: not equal.
    Ne,
    /// `lt`: less than.
    Lt,
    /// `le`: less or equal.
    Le,
    /// `gt`: greater than.
    Gt,
    /// `ge`: greater or equal.
    Ge,
}

/// Boolean operations on predicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PredOp {
    /// `and.pred`.
    And,
    /// `or.pred`.
    Or,
}

/// Special registers read with `mov.u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    /// `%tid.x`: thread index in the CTA.
    TidX,
    /// `%ctaid.x`: CTA index, x.
    CtaIdX,
    /// `%ctaid.y`: CTA index, y.
    CtaIdY,
    /// `%ctaid.z`: CTA index, z.
    CtaIdZ,
    /// `%nctaid.x`: grid size in CTAs, x.
    NCtaIdX,
    /// `%nctaid.y`: grid size in CTAs, y.
    NCtaIdY,
    /// `%laneid`: lane in the warp (0..32).
    LaneId,
}

/// State spaces of loads and stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// `.global`: device memory.
    Global,
    /// `.shared`: the CTA's shared memory (32-bit window addresses).
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
    /// One value.
    V1,
    /// `.v2`: two values.
    V2,
    /// `.v4`: four values.
    V4,
}

impl VecWidth {
    /// The width of `n` values; panics (generator bug) unless `n` is 1, 2 or 4.
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
    /// `.ca`: cache in L1 and L2.
    Ca,
    /// `.cg`: cache in L2 only (16-byte copies).
    Cg,
}

/// Copy size of `cp.async`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpSize {
    /// 4 bytes.
    B4,
    /// 8 bytes.
    B8,
    /// 16 bytes.
    B16,
}

impl CpSize {
    /// The copy size in bytes.
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
    /// `.x1`: one 8x8 matrix.
    X1,
    /// `.x2`: two 8x8 matrices.
    X2,
    /// `.x4`: four 8x8 matrices.
    X4,
}

impl LdmNum {
    /// The number of matrices (1, 2 or 4).
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
    /// IEEE half (`.f16`).
    F16,
    /// bfloat16 (`.bf16`).
    Bf16,
}

/// The legal `mma.sync` forms flash-ptx emits: m16n8k16, row.col, f32 accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmaKind {
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`.
    M16N8K16F32(HalfFmt),
}

/// `mma.sync.aligned`: D = A * B + C with the fragment shapes of [`MmaKind`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mma {
    /// The shape and input format.
    pub kind: MmaKind,
    /// D: the 16x8 f32 result fragment.
    pub d: [Reg<F32>; 4],
    /// A: the 16x16 fragment, 2 x 16-bit values per register.
    pub a: [Reg<B32>; 4],
    /// B: the 16x8 fragment, 2 x 16-bit values per register.
    pub b: [Reg<B32>; 2],
    /// C: the 16x8 f32 fragment added to A * B (D itself for an accumulation).
    pub c: [Reg<F32>; 4],
}

/// Warp shuffle modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShflMode {
    /// `.bfly`: read from lane `%laneid ^ lane`.
    Bfly,
    /// `.idx`: read from lane `lane`.
    Idx,
}

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
    /// `bar.sync id`: CTA-wide barrier.
    BarSync {
        /// The barrier number (0).
        id: u32,
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
