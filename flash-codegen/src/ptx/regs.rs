//! PTX IR layer: the registers each instruction reads and writes (for checks such as
//! "every register used is declared" and the printer tests).

use super::inst::*;
use super::types::{Addr, Operand};

/// Registers an instruction reads and writes (for checks such as "every register used
/// is declared").
pub fn regs_of(inst: &Inst) -> Vec<AnyReg> {
    fn ops(v: &[AnyOperand]) -> impl Iterator<Item = AnyReg> + '_ {
        v.iter().filter_map(|o| match o {
            AnyOperand::Reg(r) => Some(*r),
            _ => None,
        })
    }
    fn addr(a: &Addr) -> AnyReg {
        match a {
            Addr::Global(r, _) => (*r).into(),
            Addr::Shared(r, _) => (*r).into(),
        }
    }
    let mut out: Vec<AnyReg> = Vec::new();
    match inst {
        Inst::Alu { d, src, .. } => {
            out.push(*d);
            out.extend(ops(src));
        }
        Inst::Setp { p, a, b, .. } => {
            out.push(AnyReg::from(*p));
            out.extend(ops(&[*a, *b]));
        }
        Inst::Selp { d, a, b, p, .. } => {
            out.extend::<[AnyReg; 2]>([*d, (*p).into()]);
            out.extend(ops(&[*a, *b]));
        }
        Inst::PredLogic { d, a, b, .. } => {
            out.extend::<[AnyReg; 3]>([(*d).into(), (*a).into(), (*b).into()])
        }
        Inst::VoteAny { d, a } => out.extend::<[AnyReg; 2]>([(*d).into(), (*a).into()]),
        Inst::Mov { d, a, .. } => {
            out.push(*d);
            out.extend(ops(&[*a]));
        }
        Inst::MovSpecial { d, .. } | Inst::MovSmemBase { d } => out.push((*d).into()),
        Inst::Cvt { d, a, .. } => out.extend([*d, *a]),
        Inst::CvtPack { d, hi, lo, .. } => {
            out.extend::<[AnyReg; 3]>([(*d).into(), (*hi).into(), (*lo).into()])
        }
        Inst::Unpack { lo, hi, a } => {
            out.extend::<[AnyReg; 3]>([(*lo).into(), (*hi).into(), (*a).into()])
        }
        Inst::CvtaGlobal { d, a } | Inst::CvtaParam { d, a } => {
            out.extend::<[AnyReg; 2]>([(*d).into(), (*a).into()])
        }
        Inst::MovParamAddr { d, .. } => out.push((*d).into()),
        Inst::LdParam { d, .. } => out.push(*d),
        Inst::Ld { d, addr: a, .. } => {
            out.extend(d.iter().copied());
            out.push(addr(a));
        }
        Inst::St { src, addr: a, .. } => {
            out.extend(src.iter().copied());
            out.push(addr(a));
        }
        Inst::CpAsync {
            dst, src, src_size, ..
        } => {
            out.extend([addr(dst), addr(src)]);
            out.extend(src_size.as_ref().and_then(b32));
        }
        Inst::Ldmatrix { d, addr: a, .. } => {
            out.extend(d.iter().map(|r| AnyReg::from(*r)));
            out.push(addr(a));
        }
        Inst::Mma(m) => {
            out.extend(m.d.iter().chain(&m.c).map(|r| AnyReg::from(*r)));
            out.extend(m.a.iter().chain(&m.b).map(|r| AnyReg::from(*r)));
        }
        Inst::Shfl { d, a, .. } => out.extend([*d, *a]),
        Inst::RedAddF32 { addr: a, v } => out.extend::<[AnyReg; 2]>([addr(a), (*v).into()]),
        Inst::AtomAddU32 { d, addr: a, v, .. } => {
            out.extend::<[AnyReg; 2]>([(*d).into(), addr(a)]);
            out.extend(b32(v));
        }
        Inst::BarSync { id, .. } | Inst::BarArrive { id, .. } => out.extend(b32(id)),
        Inst::Wgmma(op) => wgmma_regs(op, &mut out),
        Inst::Mbarrier(op) => match op {
            MbarrierOp::Init { bar, count } => {
                out.push(addr(bar));
                out.extend(b32(count));
            }
            MbarrierOp::Arrive { bar } => out.push(addr(bar)),
            MbarrierOp::ArriveExpectTx { bar, bytes } => {
                out.push(addr(bar));
                out.extend(b32(bytes));
            }
            MbarrierOp::TryWaitParity { p, bar, parity } => {
                out.extend::<[AnyReg; 2]>([(*p).into(), addr(bar)]);
                out.extend(b32(parity));
            }
        },
        Inst::Bulk(op) => match op {
            BulkOp::TensorLoad { dst, src, bar } => {
                out.push(addr(dst));
                tensor(src, &mut out);
                out.push(addr(bar));
            }
            BulkOp::TensorStore { dst, src } => {
                tensor(dst, &mut out);
                out.push(addr(src));
            }
            BulkOp::PrefetchTensormap { tmap } => out.push((*tmap).into()),
            BulkOp::Commit | BulkOp::Wait { .. } => {}
        },
        Inst::Elect { p } => out.push((*p).into()),
        Inst::Stmatrix { src, addr: a, .. } => {
            out.extend(src.iter().map(|r| AnyReg::from(*r)));
            out.push(addr(a));
        }
        Inst::Fence(_) | Inst::SetMaxNReg(_) => {}
        Inst::CpAsyncCommit | Inst::CpAsyncWait { .. } | Inst::BarWarpSync { .. } => {}
        Inst::Bra { .. } | Inst::Ret | Inst::Trap | Inst::AssertFail { .. } => {}
    }
    out
}

/// The register of a 32-bit operand, if it is one.
fn b32(o: &Operand<super::types::B32>) -> Option<AnyReg> {
    match o {
        Operand::Reg(r) => Some((*r).into()),
        _ => None,
    }
}

/// A tensor copy's map and coordinate registers.
fn tensor(t: &TensorCoords, out: &mut Vec<AnyReg>) {
    out.push(t.tmap.into());
    out.extend(t.coords.iter().filter_map(b32));
}

/// The registers of a `wgmma` family instruction.
fn wgmma_regs(op: &WgmmaOp, out: &mut Vec<AnyReg>) {
    let WgmmaOp::Mma(m) = op else { return };
    out.extend(m.d.iter().map(|r| AnyReg::from(*r)));
    match m.a {
        WgmmaA::Desc { desc, .. } => out.push(desc.into()),
        WgmmaA::Regs(a) => out.extend(a.map(AnyReg::from)),
    }
    out.push(m.b.into());
    if let ScaleD::Pred(p) = m.scale_d {
        out.push(p.into());
    }
}
