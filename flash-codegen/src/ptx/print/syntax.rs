//! PTX printer layer: the spelling of operands (registers, immediates, addresses, labels)
//! and of the modifiers several instruction families share (types, 16-bit formats).
//!
//! Each is a `Display` newtype, so the family writers format with `write!` and never
//! build strings by hand.

use std::fmt;

use crate::ptx::inst::{AnyOperand, AnyReg, HalfFmt, Ty};
use crate::ptx::types::{Addr, Kind, Label, Reg, RegClass};

/// The register-name prefix of a class (`%r` in `%r12`).
pub(super) fn prefix(c: RegClass) -> &'static str {
    match c {
        RegClass::Pred => "%p",
        RegClass::B32 => "%r",
        RegClass::F32 => "%f",
        RegClass::B64 => "%rd",
        RegClass::B16 => "%h",
    }
}

/// A typed register: `%r12`.
pub(super) struct R<K: Kind>(pub(super) Reg<K>);
impl<K: Kind> fmt::Display for R<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", prefix(K::CLASS), self.0.id())
    }
}

/// A register of any class: `%rd3`.
pub(super) struct A(pub(super) AnyReg);
impl fmt::Display for A {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", prefix(self.0.class()), self.0.id())
    }
}

/// An operand: register, integer (hex when large) or exact hex f32 (`0f3FB8AA3B`).
pub(super) struct O(pub(super) AnyOperand);
impl fmt::Display for O {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            AnyOperand::Reg(r) => A(r).fmt(f),
            AnyOperand::Int(v) if (-(1 << 31)..(1 << 31)).contains(&v) => write!(f, "{v}"),
            AnyOperand::Int(v) => write!(f, "0x{v:X}"),
            AnyOperand::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
        }
    }
}

/// An address operand: `[%rd0]`, `[%r4+16]`.
pub(super) struct Ad(pub(super) Addr);
impl fmt::Display for Ad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (base, off) = match self.0 {
            Addr::Global(r, o) => (A(r.into()), o),
            Addr::Shared(r, o) => (A(r.into()), o),
        };
        match off {
            0 => write!(f, "[{base}]"),
            o => write!(f, "[{base}+{o}]"),
        }
    }
}

/// A label: `L3`.
pub(super) struct L(pub(super) Label);
impl fmt::Display for L {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0.0)
    }
}

/// `{a, b, c}` (with `braces`) or `a, b, c`.
pub(super) fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>, braces: bool) -> String {
    let v: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    if braces {
        format!("{{{}}}", v.join(", "))
    } else {
        v.join(", ")
    }
}

/// The type suffix of an instruction, without its dot (`u32` in `add.u32`).
pub(super) fn ty(t: Ty) -> &'static str {
    match t {
        Ty::Pred => "pred",
        Ty::B16 => "b16",
        Ty::B32 => "b32",
        Ty::U32 => "u32",
        Ty::S32 => "s32",
        Ty::F32 => "f32",
        Ty::F16 => "f16",
        Ty::B64 => "b64",
        Ty::U64 => "u64",
        Ty::S64 => "s64",
    }
}

/// A 16-bit float format (`bf16` in `cvt.rn.bf16x2.f32` and in `mma`).
pub(super) fn half(h: HalfFmt) -> &'static str {
    match h {
        HalfFmt::F16 => "f16",
        HalfFmt::Bf16 => "bf16",
    }
}
