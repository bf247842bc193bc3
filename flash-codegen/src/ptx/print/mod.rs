//! PTX printer layer: modules, entries and their parameters; the only place that knows
//! PTX syntax.
//!
//! Output is deterministic: registers are numbered per class in creation order, labels
//! in creation order, floats are written as exact hex (`0f3FB8AA3B`). Everything is written
//! with `write!` into a [`fmt::Write`]; each instruction family has its own writer, which
//! maps every opcode to its mnemonic in one `match`:
//!
//! - `alu.rs`: arithmetic, logic, `setp`, `selp`, moves, `cvt`;
//! - `mem.rs`: parameters, `cvta`, `ld`, `st`, `cp.async`, `red`;
//! - `warp.rs`: `ldmatrix`, `mma.sync`, `shfl.sync`, `vote.sync`;
//! - `control.rs`: `bra`, `ret`, barriers; guards, labels and comments;
//! - `sm90.rs`: the Hopper families (`wgmma`, `mbarrier`, TMA, fences, `setmaxnreg`,
//!   `elect.sync`, `stmatrix`);
//! - `syntax.rs`: operands (registers, immediates, addresses, labels) and shared modifiers.

use std::fmt::{self, Write};

use super::inst::{Inst, Stmt};
use super::module::{Entry, Module, Param, ParamTy};
use super::types::{F32, Kind, Operand, Reg, RegClass};

mod alu;
mod control;
mod mem;
mod sm90;
mod syntax;
mod warp;

use syntax::{O, R, prefix, ty};

/// The name of the dynamic shared memory symbol every module declares.
pub const SMEM_SYMBOL: &str = "smem";

/// Prints a whole module.
pub fn module(m: &Module) -> String {
    let mut s = String::new();
    write_module(&mut s, m).expect("writing to a String cannot fail");
    s
}

/// Prints one instruction (no guard, no indentation, with the `;`).
pub fn inst(i: &Inst) -> String {
    let mut s = String::new();
    write_inst(&mut s, i).expect("writing to a String cannot fail");
    s
}

/// Writes one instruction: hands it to the writer of its family.
pub fn write_inst<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Alu { .. }
        | Inst::Setp { .. }
        | Inst::Selp { .. }
        | Inst::PredLogic { .. }
        | Inst::Mov { .. }
        | Inst::MovSpecial { .. }
        | Inst::MovSmemBase { .. }
        | Inst::Cvt { .. }
        | Inst::CvtPack { .. }
        | Inst::Unpack { .. } => alu::write(w, i),
        Inst::LdParam { .. }
        | Inst::MovParamAddr { .. }
        | Inst::CvtaGlobal { .. }
        | Inst::CvtaParam { .. }
        | Inst::Ld { .. }
        | Inst::St { .. }
        | Inst::CpAsync { .. }
        | Inst::CpAsyncCommit
        | Inst::CpAsyncWait { .. }
        | Inst::RedAddF32 { .. }
        | Inst::AtomAddU32 { .. } => mem::write(w, i),
        Inst::Ldmatrix { .. } | Inst::Mma(_) | Inst::Shfl { .. } | Inst::VoteAny { .. } => {
            warp::write(w, i)
        }
        Inst::Bra { .. }
        | Inst::Ret
        | Inst::Trap
        | Inst::AssertFail { .. }
        | Inst::BarSync { .. }
        | Inst::BarArrive { .. }
        | Inst::BarWarpSync { .. } => control::write(w, i),
        Inst::Wgmma(_)
        | Inst::Mbarrier(_)
        | Inst::Bulk(_)
        | Inst::Fence(_)
        | Inst::SetMaxNReg(_)
        | Inst::Elect { .. }
        | Inst::Stmatrix { .. } => sm90::write(w, i),
    }
}

/// The type of a `.reg` declaration of a class.
fn decl_ty(c: RegClass) -> &'static str {
    match c {
        RegClass::Pred => ".pred",
        RegClass::B32 => ".b32",
        RegClass::F32 => ".f32",
        RegClass::B64 => ".b64",
        RegClass::B16 => ".b16",
    }
}

/// A `.param` declaration without its separator: `.param .u64 q`,
/// `.param .align 64 .b8 tmap[128]`.
fn write_param<W: Write>(w: &mut W, p: &Param<ParamTy>) -> fmt::Result {
    match p.ty {
        ParamTy::Scalar(t) => write!(w, ".param .{} {}", ty(t), p.name),
        ParamTy::Bytes { align, size } => {
            write!(w, ".param .align {align} .b8 {}[{size}]", p.name)
        }
    }
}

/// Writes one kernel entry.
pub fn write_entry<W: Write>(w: &mut W, e: &Entry) -> fmt::Result {
    writeln!(w, ".visible .entry {}(", e.name)?;
    for (i, p) in e.params.iter().enumerate() {
        let sep = if i + 1 < e.params.len() { "," } else { "" };
        w.write_str("    ")?;
        write_param(w, p)?;
        writeln!(w, "{sep}")?;
    }
    writeln!(w, ")")?;
    if let Some(n) = e.bounds.max_threads {
        let d = if e.bounds.exact_threads {
            "reqntid"
        } else {
            "maxntid"
        };
        writeln!(w, ".{d} {n}, 1, 1")?;
    }
    if let Some(n) = e.bounds.min_ctas_per_sm {
        writeln!(w, ".minnctapersm {n}")?;
    }
    writeln!(w, "{{")?;
    for c in RegClass::ALL {
        let n = e.declared(c);
        if n > 0 {
            writeln!(w, "    .reg {} {}<{n}>;", decl_ty(c), prefix(c))?;
        }
    }
    for s in &e.body {
        match s {
            Stmt::Inst { guard, inst } => {
                w.write_str("    ")?;
                control::write_guard(w, guard)?;
                write_inst(w, inst)?;
                w.write_char('\n')?;
            }
            Stmt::Label(l) => control::write_label(w, *l)?,
            Stmt::Comment(c) => control::write_comment(w, c)?,
        }
    }
    writeln!(w, "}}")
}

/// Writes a module: header, the dynamic shared memory symbol, entries.
pub fn write_module<W: Write>(w: &mut W, m: &Module) -> fmt::Result {
    if !m.target.has_sm90() {
        for e in &m.entries {
            let sm90 = e.body.iter().find_map(|s| match s {
                Stmt::Inst { inst, .. } if inst.needs_sm90() => Some(inst),
                _ => None,
            });
            if let Some(i) = sm90 {
                panic!(
                    "generator bug: {} holds {i:?}, which needs an sm_90 target, in an {} module",
                    e.name,
                    m.target.name()
                );
            }
        }
    }
    let (major, minor) = m.target.ptx_version();
    writeln!(
        w,
        "// Generated by flash-ptx {}. Do not edit.",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(w, ".version {major}.{minor}")?;
    writeln!(w, ".target {}", m.target.name())?;
    writeln!(w, ".address_size 64")?;
    writeln!(w)?;
    writeln!(w, ".extern .shared .align 1024 .b8 {SMEM_SYMBOL}[];")?;
    control::write_strings(w, &m.entries)?;
    for e in &m.entries {
        writeln!(w)?;
        write_entry(w, e)?;
    }
    Ok(())
}

/// The register operand text for a typed register (for tests and comments).
pub fn reg_name<K: Kind>(r: Reg<K>) -> String {
    R(r).to_string()
}

/// The operand text of an immediate f32 (exact hex).
pub fn f32_literal(v: f32) -> String {
    O(Operand::<F32>::Imm(v).into()).to_string()
}
