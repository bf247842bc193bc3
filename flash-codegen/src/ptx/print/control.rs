//! PTX printer layer: control flow and synchronization (`bra`, `ret`, `bar.sync`,
//! `bar.arrive`, `bar.warp.sync`) and the statements around instructions: guards, labels, comments.

use std::fmt::{self, Write};

use super::syntax::{L, O, R};
use crate::ptx::inst::Inst;
use crate::ptx::module::Entry;
use crate::ptx::types::{Guard, Label};

/// Writes a branch, return or barrier.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Bra { target, uni } => {
            let uni = if *uni { ".uni" } else { "" };
            write!(w, "bra{uni} {};", L(*target))
        }
        Inst::Ret => w.write_str("ret;"),
        Inst::Trap => w.write_str("trap;"),
        Inst::AssertFail { message } => write_assert_fail(w, message),
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

/// `__assertfail(message, file, line, function, char size)` in a scope of its own: the
/// message serves as file and function too (the driver prints all three); line 0. A
/// plain (divergent) `call`: only some lanes may reach it.
fn write_assert_fail<W: Write>(w: &mut W, message: &str) -> fmt::Result {
    w.write_str("{ .reg .b64 %af<1>; ")?;
    write!(w, "mov.u64 %af0, {message}; cvta.global.u64 %af0, %af0; ")?;
    for (i, ty) in ["b64", "b64", "b32", "b64", "b64"].iter().enumerate() {
        write!(w, ".param .{ty} af{i}; ")?;
    }
    w.write_str("st.param.b64 [af0], %af0; st.param.b64 [af1], %af0; st.param.b32 [af2], 0; ")?;
    w.write_str("st.param.b64 [af3], %af0; st.param.b64 [af4], 1; ")?;
    w.write_str("call __assertfail, (af0, af1, af2, af3, af4); }")
}

/// The module-scope declarations the entries' [`Inst::AssertFail`]s need: `__assertfail`
/// and each string once (a symbol names one text: see `Builder::assert_fail`).
pub(super) fn write_strings<W: Write>(w: &mut W, entries: &[Entry]) -> fmt::Result {
    let mut strings: Vec<&(String, String)> = entries.iter().flat_map(|e| &e.strings).collect();
    strings.sort();
    strings.dedup();
    if strings.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        ".extern .func __assertfail(.param .b64 message, .param .b64 file, .param .b32 line, \
         .param .b64 function, .param .b64 charsize);"
    )?;
    for (sym, text) in strings {
        let bytes: Vec<String> = text.bytes().chain([0]).map(|c| c.to_string()).collect();
        writeln!(
            w,
            ".global .align 1 .b8 {sym}[{}] = {{{}}};",
            bytes.len(),
            bytes.join(", ")
        )?;
    }
    Ok(())
}
