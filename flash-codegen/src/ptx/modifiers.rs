//! PTX IR layer: the modifiers of instructions, each an enum, and the legal `mma` forms.

use super::operand::Ty;
use super::types::{B32, F32, Reg};

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
    /// `abs`: |a|.
    Abs,
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
    /// `tanh.approx`: tanh(a) (sm_75+; max relative error about 2^-11).
    Tanh,
}

impl AluOp {
    /// Whether `op.ty` exists in PTX: float-only approximations and `fma`/`mul` without
    /// `.lo`, integer-only `.lo`/`.wide` forms, `neg` on signed or float types only, and
    /// `div`/`rem` on integers only (a float `div` needs a rounding mode flash-ptx never
    /// emits).
    pub fn legal_for(self, ty: Ty) -> bool {
        let float = ty == Ty::F32;
        let signed_or_float = matches!(ty, Ty::S32 | Ty::S64 | Ty::F32);
        match self {
            AluOp::Mul | AluOp::Fma | AluOp::Ex2 | AluOp::Lg2 | AluOp::Rcp | AluOp::Tanh => float,
            AluOp::MulLo
            | AluOp::MulWide
            | AluOp::MadLo
            | AluOp::MadWide
            | AluOp::Div
            | AluOp::Rem => !float,
            AluOp::And | AluOp::Or | AluOp::Xor | AluOp::Not | AluOp::Shl | AluOp::Shr => !float,
            AluOp::Neg | AluOp::Abs => signed_or_float,
            AluOp::Add | AluOp::Sub | AluOp::Min | AluOp::Max => true,
        }
    }

    /// Number of source operands.
    pub fn arity(self) -> usize {
        match self {
            AluOp::Neg
            | AluOp::Abs
            | AluOp::Not
            | AluOp::Ex2
            | AluOp::Lg2
            | AluOp::Rcp
            | AluOp::Tanh => 1,
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
    /// `%nctaid.z`: grid size in CTAs, z.
    NCtaIdZ,
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
    /// `ld.volatile`: kept in program order with the kernel's other volatile accesses
    /// (ptxas neither merges nor moves them), so that loads issued early stay early.
    Volatile,
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
    /// The form moving `n` matrices (`ldmatrix` / `stmatrix` .x1, .x2, .x4); other counts
    /// are a generator bug.
    pub fn of(n: usize) -> Self {
        match n {
            1 => LdmNum::X1,
            2 => LdmNum::X2,
            4 => LdmNum::X4,
            _ => panic!("generator bug: .x{n} (ldmatrix / stmatrix move 1, 2 or 4 matrices)"),
        }
    }

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
