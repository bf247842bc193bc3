//! PTX printer layer: arithmetic, logic, comparisons (`setp`), selects (`selp`), moves and
//! conversions (`cvt`, packing and unpacking of 16-bit halves).

use std::fmt::{self, Write};

use super::SMEM_SYMBOL;
use super::syntax::{A, O, R, half, list, ty};
use crate::ptx::inst::{AluOp, Cmp, Inst, PredOp, Special, Ty};

/// The mnemonic of an ALU operation, with its fixed modifiers (`fma.rn`, `ex2.approx.ftz`).
fn alu_op(op: AluOp) -> &'static str {
    match op {
        AluOp::Add => "add",
        AluOp::Sub => "sub",
        AluOp::Mul => "mul",
        AluOp::MulLo => "mul.lo",
        AluOp::MulWide => "mul.wide",
        AluOp::MadLo => "mad.lo",
        AluOp::MadWide => "mad.wide",
        AluOp::Fma => "fma.rn",
        AluOp::Min => "min",
        AluOp::Max => "max",
        AluOp::Neg => "neg",
        AluOp::Abs => "abs",
        AluOp::And => "and",
        AluOp::Or => "or",
        AluOp::Xor => "xor",
        AluOp::Not => "not",
        AluOp::Shl => "shl",
        AluOp::Shr => "shr",
        AluOp::Div => "div",
        AluOp::Rem => "rem",
        AluOp::Ex2 => "ex2.approx.ftz",
        AluOp::Lg2 => "lg2.approx.ftz",
        AluOp::Rcp => "rcp.approx.ftz",
        AluOp::Tanh => "tanh.approx",
    }
}

/// The comparison of a `setp`.
fn cmp(c: Cmp) -> &'static str {
    match c {
        Cmp::Eq => "eq",
        Cmp::Ne => "ne",
        Cmp::Lt => "lt",
        Cmp::Le => "le",
        Cmp::Gt => "gt",
        Cmp::Ge => "ge",
    }
}

/// The predicate operation of `and.pred` / `or.pred`.
fn pred_op(op: PredOp) -> &'static str {
    match op {
        PredOp::And => "and",
        PredOp::Or => "or",
    }
}

/// A special register.
fn special(s: Special) -> &'static str {
    match s {
        Special::TidX => "%tid.x",
        Special::CtaIdX => "%ctaid.x",
        Special::CtaIdY => "%ctaid.y",
        Special::CtaIdZ => "%ctaid.z",
        Special::NCtaIdX => "%nctaid.x",
        Special::NCtaIdY => "%nctaid.y",
        Special::NCtaIdZ => "%nctaid.z",
        Special::LaneId => "%laneid",
    }
}

/// The rounding modifier of a `cvt`: `.rn` into a float, `.rzi` from a float into an
/// integer, none between integers.
fn cvt_rounding(d: Ty, s: Ty) -> &'static str {
    let is_float = |t| matches!(t, Ty::F32 | Ty::F16);
    match (is_float(d), is_float(s)) {
        (true, false) => ".rn",
        (false, true) => ".rzi",
        _ => "",
    }
}

/// Writes an arithmetic, logic, comparison, select, move or conversion instruction.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Alu { op, ty: t, d, src } => {
            let src = list(src.iter().map(|s| O(*s)), false);
            write!(w, "{}.{} {}, {src};", alu_op(*op), ty(*t), A(*d))
        }
        Inst::Setp {
            cmp: c,
            ty: t,
            p,
            a,
            b,
        } => {
            let (c, t) = (cmp(*c), ty(*t));
            write!(w, "setp.{c}.{t} {}, {}, {};", R(*p), O(*a), O(*b))
        }
        Inst::Selp { ty: t, d, a, b, p } => {
            let t = ty(*t);
            write!(w, "selp.{t} {}, {}, {}, {};", A(*d), O(*a), O(*b), R(*p))
        }
        Inst::PredLogic { op, d, a, b } => {
            let op = pred_op(*op);
            write!(w, "{op}.pred {}, {}, {};", R(*d), R(*a), R(*b))
        }
        Inst::Mov { ty: t, d, a } => write!(w, "mov.{} {}, {};", ty(*t), A(*d), O(*a)),
        Inst::MovSpecial { d, s } => write!(w, "mov.u32 {}, {};", R(*d), special(*s)),
        Inst::MovSmemBase { d } => write!(w, "mov.u32 {}, {SMEM_SYMBOL};", R(*d)),
        Inst::Cvt { d_ty, s_ty, d, a } => {
            let rnd = cvt_rounding(*d_ty, *s_ty);
            let (dt, st) = (ty(*d_ty), ty(*s_ty));
            write!(w, "cvt{rnd}.{dt}.{st} {}, {};", A(*d), A(*a))
        }
        Inst::CvtPack { fmt, d, hi, lo } => {
            let h = half(*fmt);
            write!(w, "cvt.rn.{h}x2.f32 {}, {}, {};", R(*d), R(*hi), R(*lo))
        }
        Inst::Unpack { lo, hi, a } => write!(w, "mov.b32 {{{}, {}}}, {};", R(*lo), R(*hi), R(*a)),
        other => unreachable!("generator bug: {other:?} routed to the ALU writer"),
    }
}
