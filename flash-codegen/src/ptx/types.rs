//! PTX IR layer: register classes, typed register handles, operands and addresses.
//!
//! Registers are handles the [`Builder`](super::Builder) alone creates; their class travels
//! in the type (`Reg<F32>` cannot be passed where a `Reg<B32>` is expected), so an
//! instruction built from the IR is well-typed by construction.

use std::marker::PhantomData;

/// The register families a kernel declares: one `.reg` line each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    /// Predicates (`%p`).
    Pred,
    /// 32-bit integer or packed 2 x 16-bit data (`%r`).
    B32,
    /// 32-bit floats (`%f`).
    F32,
    /// 64-bit integers and addresses (`%rd`).
    B64,
    /// 16-bit halves (`%h`), for conversions of single f16 values.
    B16,
}

impl RegClass {
    /// Declaration order (and index into `Entry::reg_counts`).
    pub const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B32,
        RegClass::F32,
        RegClass::B64,
        RegClass::B16,
    ];
}

/// A register class marker type (see [`Pred`], [`B32`], [`F32`], [`B64`]).
pub trait Kind: Copy + Eq + std::fmt::Debug + 'static {
    /// The class of registers of this kind.
    const CLASS: RegClass;
    /// The immediate that may stand where a register of this class is read.
    type Imm: Copy + std::fmt::Debug + PartialEq;
}

macro_rules! kinds {
    ($($(#[$doc:meta])* $name:ident => $class:ident, $imm:ty;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name;
        impl Kind for $name {
            const CLASS: RegClass = RegClass::$class;
            type Imm = $imm;
        }
    )*};
}

kinds! {
    /// Predicate registers (`%p`).
    Pred => Pred, bool;
    /// 32-bit integer or packed 2 x 16-bit data (`%r`).
    B32 => B32, i64;
    /// 32-bit float (`%f`).
    F32 => F32, f32;
    /// 64-bit integer or address (`%rd`).
    B64 => B64, i64;
    /// 16-bit data (`%h`).
    B16 => B16, i64;
}

/// A virtual register of class `K`. Only the builder creates them.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Reg<K: Kind> {
    pub(crate) id: u32,
    _k: PhantomData<K>,
}

impl<K: Kind> Clone for Reg<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Kind> Copy for Reg<K> {}

impl<K: Kind> Reg<K> {
    pub(crate) fn new(id: u32) -> Self {
        Reg {
            id,
            _k: PhantomData,
        }
    }
    /// The register's number within its class (`%r<id>`).
    pub fn id(self) -> u32 {
        self.id
    }
    /// The register's class.
    pub fn class(self) -> RegClass {
        K::CLASS
    }
}

/// A register or an immediate of the same class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand<K: Kind> {
    /// A register.
    Reg(Reg<K>),
    /// An immediate (an integer, a bool or an f32, by class).
    Imm(K::Imm),
}

impl<K: Kind> From<Reg<K>> for Operand<K> {
    fn from(r: Reg<K>) -> Self {
        Operand::Reg(r)
    }
}
impl From<i64> for Operand<B32> {
    fn from(v: i64) -> Self {
        Operand::Imm(v)
    }
}
impl From<u32> for Operand<B32> {
    fn from(v: u32) -> Self {
        Operand::Imm(v as i64)
    }
}
impl From<i32> for Operand<B32> {
    fn from(v: i32) -> Self {
        Operand::Imm(v as i64)
    }
}
impl From<i64> for Operand<B64> {
    fn from(v: i64) -> Self {
        Operand::Imm(v)
    }
}
impl From<f32> for Operand<F32> {
    fn from(v: f32) -> Self {
        Operand::Imm(v)
    }
}

/// A memory address: a register (64-bit generic/global or 32-bit shared window) plus a
/// constant byte offset, or a named parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Addr {
    /// A 64-bit global (or generic) address register plus a byte offset.
    Global(Reg<B64>, i32),
    /// A 32-bit shared-window address register plus a byte offset.
    Shared(Reg<B32>, i32),
}

/// A predicate guard `@%p` / `@!%p` on one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The predicate register tested.
    pub pred: Reg<Pred>,
    /// `true` runs the instruction when the predicate is false (`@!%p`).
    pub negate: bool,
}

/// A branch target, made only by the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub(crate) u32);
