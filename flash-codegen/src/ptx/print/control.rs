//! PTX printer layer: control flow and synchronization (`bra`, `ret`, `bar.sync`,
//! `bar.arrive`, `bar.warp.sync`) and the statements around instructions: guards, labels, comments.

use std::fmt::{self, Write};

use super::syntax::{L, O, R};
use crate::ptx::inst::Inst;
use crate::ptx::types::{Guard, Label};

/// Writes a branch, return or barrier.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Bra { target, uni } => {
            let uni = if *uni { ".uni" } else { "" };
            write!(w, "bra{uni} {};", L(*target))
        }
        Inst::Ret => w.write_str("ret;"),
        Inst::BarSync { id, threads } => match threads {
            None => write!(w, "bar.sync {};", O((*id).into())),
            Some(n) => write!(w, "bar.sync {}, {n};", O((*id).into())),
        },
        Inst::BarArrive { id, threads } => {
            write!(w, "bar.arrive {}, {threads};", O((*id).into()))
        }
        Inst::BarWarpSync { mask } => write!(w, "bar.warp.sync {mask:#010x};"),
        other => unreachable!("generator bug: {other:?} routed to the control writer"),
    }
}

/// The guard of an instruction with its trailing space (`@%p0 `, `@!%p0 `), if any.
pub(super) fn write_guard<W: Write>(w: &mut W, g: &Option<Guard>) -> fmt::Result {
    match g {
        Some(g) => write!(w, "@{}{} ", if g.negate { "!" } else { "" }, R(g.pred)),
        None => Ok(()),
    }
}

/// A label line (`L3:`).
pub(super) fn write_label<W: Write>(w: &mut W, l: Label) -> fmt::Result {
    writeln!(w, "{}:", L(l))
}

/// A comment line (`    // text`).
pub(super) fn write_comment<W: Write>(w: &mut W, text: &str) -> fmt::Result {
    writeln!(w, "    // {text}")
}
