//! PTX printer layer: kernel parameters, address conversions (`cvta`), loads and stores,
//! asynchronous copies (`cp.async`) and reductions (`red`).

use std::fmt::{self, Write};

use super::syntax::{A, Ad, O, R, list, ty};
use crate::ptx::inst::{CpCache, Inst, LdCache, Space, VecWidth};

/// A state space, without its dot.
fn space(s: Space) -> &'static str {
    match s {
        Space::Global => "global",
        Space::Shared => "shared",
    }
}

/// The vector suffix of a load or store of `n` registers (`.v4`; none for one).
fn vec_suffix(n: usize) -> &'static str {
    match VecWidth::of(n) {
        VecWidth::V1 => "",
        VecWidth::V2 => ".v2",
        VecWidth::V4 => ".v4",
    }
}

/// The cache operator of a global load (`.nc`: the read-only, non-coherent path;
/// `.volatile` is a qualifier of its own, printed before the state space).
fn ld_cache(c: LdCache) -> &'static str {
    match c {
        LdCache::Default => "",
        LdCache::NonCoherent => ".nc",
        LdCache::Volatile => "",
    }
}

/// The cache level of a `cp.async`, without its dot.
fn cp_cache(c: CpCache) -> &'static str {
    match c {
        CpCache::Ca => "ca",
        CpCache::Cg => "cg",
    }
}

/// Writes a parameter, address-conversion, memory or reduction instruction.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::LdParam { ty: t, d, param } => write!(w, "ld.param.{} {}, [{param}];", ty(*t), A(*d)),
        Inst::MovParamAddr { d, param } => write!(w, "mov.b64 {}, {param};", R(*d)),
        Inst::CvtaGlobal { d, a } => write!(w, "cvta.to.global.u64 {}, {};", R(*d), R(*a)),
        Inst::CvtaParam { d, a } => write!(w, "cvta.param.u64 {}, {};", R(*d), R(*a)),
        Inst::Ld {
            space: s,
            cache,
            ty: t,
            d,
            addr,
        } => {
            let (s, nc, v, t) = (space(*s), ld_cache(*cache), vec_suffix(d.len()), ty(*t));
            let dst = list(d.iter().map(|r| A(*r)), d.len() > 1);
            match cache {
                LdCache::Volatile => write!(w, "ld.volatile.{s}{v}.{t} {dst}, {};", Ad(*addr)),
                _ => write!(w, "ld.{s}{nc}{v}.{t} {dst}, {};", Ad(*addr)),
            }
        }
        Inst::St {
            space: s,
            ty: t,
            src,
            addr,
        } => {
            let (s, v, t) = (space(*s), vec_suffix(src.len()), ty(*t));
            let src = list(src.iter().map(|r| A(*r)), src.len() > 1);
            write!(w, "st.{s}{v}.{t} {}, {src};", Ad(*addr))
        }
        Inst::CpAsync {
            cache,
            size,
            dst,
            src,
            src_size,
        } => {
            let c = cp_cache(*cache);
            let n = size.bytes();
            write!(
                w,
                "cp.async.{c}.shared.global {}, {}, {n}",
                Ad(*dst),
                Ad(*src)
            )?;
            if let Some(n) = src_size {
                write!(w, ", {}", O((*n).into()))?;
            }
            w.write_char(';')
        }
        Inst::CpAsyncCommit => w.write_str("cp.async.commit_group;"),
        Inst::CpAsyncWait { pending } => write!(w, "cp.async.wait_group {pending};"),
        Inst::RedAddF32 { addr, v } => write!(w, "red.global.add.f32 {}, {};", Ad(*addr), R(*v)),
        Inst::AtomAddU32 {
            d,
            addr,
            v,
            acq_rel,
        } => {
            let sem = if *acq_rel { ".acq_rel.gpu" } else { "" };
            write!(
                w,
                "atom{sem}.global.add.u32 {}, {}, {};",
                R(*d),
                Ad(*addr),
                O((*v).into())
            )
        }
        other => unreachable!("generator bug: {other:?} routed to the memory writer"),
    }
}
