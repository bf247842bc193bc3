//! PTX printer layer: warp-collective instructions: tensor cores (`ldmatrix`, `mma.sync`),
//! shuffles (`shfl.sync`) and votes (`vote.sync`).

use std::fmt::{self, Write};

use super::syntax::{A, Ad, R, half, list};
use crate::ptx::inst::{Inst, MmaKind, ShflMode};

/// The exchange pattern of a `shfl.sync`, without its dot.
fn shfl_mode(m: ShflMode) -> &'static str {
    match m {
        ShflMode::Bfly => "bfly",
        ShflMode::Idx => "idx",
    }
}

/// Writes a tensor-core, shuffle or vote instruction.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Ldmatrix {
            num,
            trans,
            d,
            addr,
        } => {
            let (n, t) = (num.count(), if *trans { ".trans" } else { "" });
            let dst = list(d.iter().map(|r| R(*r)), true);
            write!(
                w,
                "ldmatrix.sync.aligned.m8n8.x{n}{t}.shared.b16 {dst}, {};",
                Ad(*addr)
            )
        }
        Inst::Mma(m) => {
            let MmaKind::M16N8K16F32(h) = m.kind;
            let h = half(h);
            write!(
                w,
                "mma.sync.aligned.m16n8k16.row.col.f32.{h}.{h}.f32 {}, {}, {}, {};",
                list(m.d.iter().map(|r| R(*r)), true),
                list(m.a.iter().map(|r| R(*r)), true),
                list(m.b.iter().map(|r| R(*r)), true),
                list(m.c.iter().map(|r| R(*r)), true)
            )
        }
        Inst::Shfl {
            mode,
            d,
            a,
            lane,
            clamp,
            mask,
        } => {
            let m = shfl_mode(*mode);
            let (d, a) = (A(*d), A(*a));
            write!(
                w,
                "shfl.sync.{m}.b32 {d}, {a}, {lane}, 0x{clamp:x}, 0x{mask:x};"
            )
        }
        Inst::VoteAny { d, a } => {
            write!(w, "vote.sync.any.pred {}, {}, 0xffffffff;", R(*d), R(*a))
        }
        other => unreachable!("generator bug: {other:?} routed to the warp writer"),
    }
}
