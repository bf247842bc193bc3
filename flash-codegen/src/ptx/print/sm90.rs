//! PTX printer layer: the Hopper families (`wgmma`, `mbarrier`, `cp.async.bulk`, proxy
//! fences, `setmaxnreg`, `elect.sync`, `stmatrix`). Spellings follow
//! shared/docs/ptx-reference.md section 10 and the PTX ISA.

use std::fmt::{self, Write};

use super::syntax::{Ad, O, R, half, list};
use crate::ptx::inst::Inst;
use crate::ptx::sm90::{BulkOp, Fence, MbarrierOp, ScaleD, TensorCoords, WgmmaA, WgmmaOp};

/// `[tmap, {c0, c1, ...}]`.
struct Tc<'a>(&'a TensorCoords);
impl fmt::Display for Tc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = list(self.0.coords.iter().map(|c| O((*c).into())), true);
        write!(f, "[{}, {c}]", R(self.0.tmap))
    }
}

/// `0` / `1` for an immediate flag.
fn bit(b: bool) -> u8 {
    u8::from(b)
}

/// Writes a `wgmma` family instruction.
fn wgmma<W: Write>(w: &mut W, op: &WgmmaOp) -> fmt::Result {
    match op {
        WgmmaOp::Fence => w.write_str("wgmma.fence.sync.aligned;"),
        WgmmaOp::Commit => w.write_str("wgmma.commit_group.sync.aligned;"),
        WgmmaOp::Wait(n) => write!(w, "wgmma.wait_group.sync.aligned {n};"),
        WgmmaOp::Mma(m) => {
            let h = half(m.fmt);
            let d = list(m.d.iter().map(|r| R(*r)), true);
            let scale_d = match m.scale_d {
                ScaleD::Imm(v) => bit(v).to_string(),
                ScaleD::Pred(p) => R(p).to_string(),
            };
            write!(
                w,
                "wgmma.mma_async.sync.aligned.m64n{}k16.f32.{h}.{h} {d}, ",
                m.n
            )?;
            // scale-a and scale-b are 1 (no negation); RS has no trans-a.
            match m.a {
                WgmmaA::Desc { desc, trans } => write!(
                    w,
                    "{}, {}, {scale_d}, 1, 1, {}, {};",
                    R(desc),
                    R(m.b),
                    bit(trans),
                    bit(m.trans_b)
                ),
                WgmmaA::Regs(a) => write!(
                    w,
                    "{}, {}, {scale_d}, 1, 1, {};",
                    list(a.iter().map(|r| R(*r)), true),
                    R(m.b),
                    bit(m.trans_b)
                ),
            }
        }
    }
}

/// Writes an `mbarrier` family instruction.
fn mbarrier<W: Write>(w: &mut W, op: &MbarrierOp) -> fmt::Result {
    let s = ".shared::cta.b64";
    match op {
        MbarrierOp::Init { bar, count } => {
            write!(w, "mbarrier.init{s} {}, {};", Ad(*bar), O((*count).into()))
        }
        MbarrierOp::Arrive { bar } => write!(w, "mbarrier.arrive{s} _, {};", Ad(*bar)),
        MbarrierOp::ArriveExpectTx { bar, bytes } => write!(
            w,
            "mbarrier.arrive.expect_tx{s} _, {}, {};",
            Ad(*bar),
            O((*bytes).into())
        ),
        MbarrierOp::TryWaitParity { p, bar, parity } => write!(
            w,
            "mbarrier.try_wait.parity{s} {}, {}, {};",
            R(*p),
            Ad(*bar),
            O((*parity).into())
        ),
    }
}

/// Writes a bulk-copy (TMA) family instruction.
fn bulk<W: Write>(w: &mut W, op: &BulkOp) -> fmt::Result {
    match op {
        BulkOp::TensorLoad { dst, src, bar } => write!(
            w,
            "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes {}, {}, {};",
            src.rank(),
            Ad(*dst),
            Tc(src),
            Ad(*bar)
        ),
        BulkOp::TensorStore { dst, src } => write!(
            w,
            "cp.async.bulk.tensor.{}d.global.shared::cta.bulk_group {}, {};",
            dst.rank(),
            Tc(dst),
            Ad(*src)
        ),
        BulkOp::Commit => w.write_str("cp.async.bulk.commit_group;"),
        BulkOp::Wait { pending, read } => {
            let r = if *read { ".read" } else { "" };
            write!(w, "cp.async.bulk.wait_group{r} {pending};")
        }
        BulkOp::PrefetchTensormap { tmap } => write!(w, "prefetch.tensormap [{}];", R(*tmap)),
    }
}

/// Writes a Hopper family instruction.
pub(super) fn write<W: Write>(w: &mut W, i: &Inst) -> fmt::Result {
    match i {
        Inst::Wgmma(op) => wgmma(w, op),
        Inst::Mbarrier(op) => mbarrier(w, op),
        Inst::Bulk(op) => bulk(w, op),
        Inst::Fence(Fence::ProxyAsyncShared) => w.write_str("fence.proxy.async.shared::cta;"),
        Inst::Fence(Fence::MbarrierInit) => w.write_str("fence.mbarrier_init.release.cluster;"),
        Inst::SetMaxNReg(s) => {
            let dir = if s.inc { "inc" } else { "dec" };
            write!(w, "setmaxnreg.{dir}.sync.aligned.u32 {};", s.count)
        }
        Inst::Elect { p } => write!(w, "elect.sync _|{}, 0xffffffff;", R(*p)),
        Inst::Stmatrix {
            num,
            trans,
            src,
            addr,
        } => {
            let (n, t) = (num.count(), if *trans { ".trans" } else { "" });
            write!(
                w,
                "stmatrix.sync.aligned.m8n8.x{n}{t}.shared.b16 {}, {};",
                Ad(*addr),
                list(src.iter().map(|r| R(*r)), true)
            )
        }
        other => unreachable!("generator bug: {other:?} routed to the sm90 writer"),
    }
}
