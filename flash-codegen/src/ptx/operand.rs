//! PTX IR layer: instruction type suffixes and class-erased registers and operands.

use super::types::{B16, B32, B64, F32, Operand, Pred, Reg, RegClass};

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
