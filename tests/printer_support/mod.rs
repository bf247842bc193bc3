//! The printer's table (tests/printer.rs): one (instruction, exact text) row per
//! instruction form of the IR, each as the PTX ISA writes it.

use flash_codegen::ptx::inst::{AluOp, CpCache, CpSize, LdmNum, Mma, MmaKind, PredOp, ShflMode};
use flash_codegen::ptx::{
    Addr, AnyOperand, AnyReg, B32, B64, Builder, Cmp, F32, HalfFmt, Inst, LdCache, Operand, Pred,
    Reg, Space, Special, Ty,
};

/// Registers %p0..3, %r0..7, %f0..7, %rd0..3 of one builder.
struct Regs {
    p: [Reg<Pred>; 4],
    r: [Reg<B32>; 8],
    f: [Reg<F32>; 8],
    rd: [Reg<B64>; 4],
}

fn regs(b: &mut Builder) -> Regs {
    Regs {
        p: std::array::from_fn(|_| b.reg()),
        r: std::array::from_fn(|_| b.reg()),
        f: std::array::from_fn(|_| b.reg()),
        rd: std::array::from_fn(|_| b.reg()),
    }
}

fn alu(op: AluOp, ty: Ty, d: impl Into<AnyReg>, src: Vec<AnyOperand>) -> Inst {
    Inst::Alu {
        op,
        ty,
        d: d.into(),
        src,
    }
}

fn any<T: Into<AnyOperand>>(x: T) -> AnyOperand {
    x.into()
}

fn int(v: i64) -> AnyOperand {
    AnyOperand::Int(v)
}

fn ld(space: Space, cache: LdCache, ty: Ty, d: Vec<AnyReg>, addr: Addr) -> Inst {
    Inst::Ld {
        space,
        cache,
        ty,
        d,
        addr,
    }
}

fn cp(cache: CpCache, size: CpSize, src_size: Option<AnyOperand>, r: &Regs) -> Inst {
    let src_size = src_size.map(|o| match o {
        AnyOperand::Reg(AnyReg::B32(x)) => x.into(),
        AnyOperand::Int(v) => v.into(),
        o => panic!("src_size {o:?}"),
    });
    Inst::CpAsync {
        cache,
        size,
        dst: Addr::Shared(r.r[0], 0),
        src: Addr::Global(r.rd[0], 0),
        src_size,
    }
}

fn ldm(num: LdmNum, trans: bool, r: &Regs) -> Inst {
    let n = match num {
        LdmNum::X1 => 1,
        LdmNum::X2 => 2,
        LdmNum::X4 => 4,
    };
    Inst::Ldmatrix {
        num,
        trans,
        d: r.r[..n].to_vec(),
        addr: Addr::Shared(r.r[4], 256),
    }
}

/// The table. Rows are built from registers made by `b`, so the printed names are fixed.
#[rustfmt::skip]
pub fn table(b: &mut Builder) -> Vec<(Inst, &'static str)> {
    use AluOp::*;
    let r = regs(b);
    let label = b.label();
    let (p, x, f, rd) = (r.p, r.r, r.f, r.rd);
    let (r1, r2) = (any(x[1]), any(x[2]));
    let (f1, f2, f3) = (any(f[1]), any(f[2]), any(f[3]));
    let mma = |h| {
        Inst::Mma(Mma {
            kind: MmaKind::M16N8K16F32(h),
            d: [f[0], f[1], f[2], f[3]],
            a: [x[0], x[1], x[2], x[3]],
            b: [x[4], x[5]],
            c: [f[4], f[5], f[6], f[7]],
        })
    };
    vec![
        // -- integer and float arithmetic (one row per AluOp, plus typed variants) --
        (alu(Add, Ty::U32, x[0], vec![r1, r2]), "add.u32 %r0, %r1, %r2;"),
        (alu(Add, Ty::S32, x[0], vec![r1, int(-1)]), "add.s32 %r0, %r1, -1;"),
        (alu(Add, Ty::S64, rd[0], vec![any(rd[1]), any(rd[2])]), "add.s64 %rd0, %rd1, %rd2;"),
        (alu(Add, Ty::F32, f[0], vec![f1, AnyOperand::F32(1.0f32)]), "add.f32 %f0, %f1, 0f3F800000;"),
        (alu(Sub, Ty::U32, x[0], vec![r1, int(8)]), "sub.u32 %r0, %r1, 8;"),
        (alu(Sub, Ty::F32, f[0], vec![f1, f2]), "sub.f32 %f0, %f1, %f2;"),
        (alu(Mul, Ty::F32, f[0], vec![f1, AnyOperand::F32(std::f32::consts::LOG2_E)]), "mul.f32 %f0, %f1, 0f3FB8AA3B;"),
        (alu(MulLo, Ty::U32, x[0], vec![r1, int(128)]), "mul.lo.u32 %r0, %r1, 128;"),
        (alu(MulLo, Ty::U64, rd[0], vec![any(rd[1]), any(rd[2])]), "mul.lo.u64 %rd0, %rd1, %rd2;"),
        (alu(MulWide, Ty::U32, rd[0], vec![r1, int(4)]), "mul.wide.u32 %rd0, %r1, 4;"),
        (alu(MadLo, Ty::U32, x[0], vec![r1, int(16), r2]), "mad.lo.u32 %r0, %r1, 16, %r2;"),
        (alu(MadWide, Ty::U32, rd[0], vec![r1, r2, any(rd[1])]), "mad.wide.u32 %rd0, %r1, %r2, %rd1;"),
        (alu(Fma, Ty::F32, f[0], vec![f1, f2, f3]), "fma.rn.f32 %f0, %f1, %f2, %f3;"),
        (alu(Min, Ty::U32, x[0], vec![r1, r2]), "min.u32 %r0, %r1, %r2;"),
        (alu(Min, Ty::S32, x[0], vec![r1, int(0)]), "min.s32 %r0, %r1, 0;"),
        (alu(Min, Ty::F32, f[0], vec![f1, f2]), "min.f32 %f0, %f1, %f2;"),
        (alu(Max, Ty::U32, x[0], vec![r1, r2]), "max.u32 %r0, %r1, %r2;"),
        (alu(Max, Ty::S32, x[0], vec![r1, r2]), "max.s32 %r0, %r1, %r2;"),
        (alu(Max, Ty::F32, f[0], vec![f1, AnyOperand::F32(f32::NEG_INFINITY)]), "max.f32 %f0, %f1, 0fFF800000;"),
        (alu(Neg, Ty::F32, f[0], vec![f1]), "neg.f32 %f0, %f1;"),
        (alu(Abs, Ty::F32, f[0], vec![f1]), "abs.f32 %f0, %f1;"),
        (alu(And, Ty::B32, x[0], vec![r1, int(0xFFFF_FC00)]), "and.b32 %r0, %r1, 0xFFFFFC00;"),
        (alu(Or, Ty::B32, x[0], vec![r1, r2]), "or.b32 %r0, %r1, %r2;"),
        (alu(Or, Ty::B64, rd[0], vec![any(rd[1]), int(0x4000_0040_0001_0000)]), "or.b64 %rd0, %rd1, 0x4000004000010000;"),
        (alu(Xor, Ty::B32, x[0], vec![r1, r2]), "xor.b32 %r0, %r1, %r2;"),
        (alu(Not, Ty::B32, x[0], vec![r1]), "not.b32 %r0, %r1;"),
        (alu(Shl, Ty::B32, x[0], vec![r1, int(4)]), "shl.b32 %r0, %r1, 4;"),
        (alu(Shr, Ty::U32, x[0], vec![r1, int(5)]), "shr.u32 %r0, %r1, 5;"),
        (alu(Div, Ty::U32, x[0], vec![r1, r2]), "div.u32 %r0, %r1, %r2;"),
        (alu(Rem, Ty::U32, x[0], vec![r1, int(3)]), "rem.u32 %r0, %r1, 3;"),
        (alu(Ex2, Ty::F32, f[0], vec![f1]), "ex2.approx.ftz.f32 %f0, %f1;"),
        (alu(Lg2, Ty::F32, f[0], vec![f1]), "lg2.approx.ftz.f32 %f0, %f1;"),
        (alu(Rcp, Ty::F32, f[0], vec![f1]), "rcp.approx.ftz.f32 %f0, %f1;"),
        (alu(Tanh, Ty::F32, f[0], vec![f1]), "tanh.approx.f32 %f0, %f1;"),
        // -- comparisons, selects, predicate logic --
        (Inst::Setp { cmp: Cmp::Eq, ty: Ty::F32, p: p[0], a: f1, b: AnyOperand::F32(f32::NEG_INFINITY) }, "setp.eq.f32 %p0, %f1, 0fFF800000;"),
        (Inst::Setp { cmp: Cmp::Ne, ty: Ty::F32, p: p[0], a: f1, b: f1 }, "setp.ne.f32 %p0, %f1, %f1;"),
        (Inst::Setp { cmp: Cmp::Lt, ty: Ty::U32, p: p[0], a: r1, b: r2 }, "setp.lt.u32 %p0, %r1, %r2;"),
        (Inst::Setp { cmp: Cmp::Le, ty: Ty::S32, p: p[1], a: r1, b: int(0) }, "setp.le.s32 %p1, %r1, 0;"),
        (Inst::Setp { cmp: Cmp::Gt, ty: Ty::U32, p: p[0], a: r1, b: int(64) }, "setp.gt.u32 %p0, %r1, 64;"),
        (Inst::Setp { cmp: Cmp::Ge, ty: Ty::S32, p: p[0], a: r1, b: r2 }, "setp.ge.s32 %p0, %r1, %r2;"),
        (Inst::Selp { ty: Ty::B32, d: x[0].into(), a: int(16), b: int(0), p: p[1] }, "selp.b32 %r0, 16, 0, %p1;"),
        (Inst::Selp { ty: Ty::F32, d: f[0].into(), a: AnyOperand::F32(0.0f32), b: f1, p: p[1] }, "selp.f32 %f0, 0f00000000, %f1, %p1;"),
        (Inst::Selp { ty: Ty::B64, d: rd[0].into(), a: any(rd[1]), b: int(0), p: p[1] }, "selp.b64 %rd0, %rd1, 0, %p1;"),
        (Inst::PredLogic { op: PredOp::And, d: p[2], a: p[0], b: p[1] }, "and.pred %p2, %p0, %p1;"),
        (Inst::PredLogic { op: PredOp::Or, d: p[2], a: p[0], b: p[1] }, "or.pred %p2, %p0, %p1;"),
        // -- moves, special registers, conversions, parameters --
        (Inst::Mov { ty: Ty::B32, d: x[0].into(), a: r1 }, "mov.b32 %r0, %r1;"),
        (Inst::Mov { ty: Ty::U32, d: x[0].into(), a: int(7) }, "mov.u32 %r0, 7;"),
        (Inst::Mov { ty: Ty::F32, d: f[0].into(), a: AnyOperand::F32(0.0f32) }, "mov.f32 %f0, 0f00000000;"),
        (Inst::Mov { ty: Ty::B64, d: rd[0].into(), a: any(rd[1]) }, "mov.b64 %rd0, %rd1;"),
        (Inst::MovSpecial { d: x[0], s: Special::TidX }, "mov.u32 %r0, %tid.x;"),
        (Inst::MovSpecial { d: x[0], s: Special::CtaIdX }, "mov.u32 %r0, %ctaid.x;"),
        (Inst::MovSpecial { d: x[0], s: Special::CtaIdY }, "mov.u32 %r0, %ctaid.y;"),
        (Inst::MovSpecial { d: x[0], s: Special::CtaIdZ }, "mov.u32 %r0, %ctaid.z;"),
        (Inst::MovSpecial { d: x[0], s: Special::NCtaIdX }, "mov.u32 %r0, %nctaid.x;"),
        (Inst::MovSpecial { d: x[0], s: Special::LaneId }, "mov.u32 %r0, %laneid;"),
        (Inst::MovSmemBase { d: x[0] }, "mov.u32 %r0, smem;"),
        (Inst::Cvt { d_ty: Ty::U64, s_ty: Ty::U32, d: rd[0].into(), a: x[1].into() }, "cvt.u64.u32 %rd0, %r1;"),
        (Inst::Cvt { d_ty: Ty::F32, s_ty: Ty::S32, d: f[0].into(), a: x[1].into() }, "cvt.rn.f32.s32 %f0, %r1;"),
        (Inst::Cvt { d_ty: Ty::S32, s_ty: Ty::F32, d: x[0].into(), a: f[1].into() }, "cvt.rzi.s32.f32 %r0, %f1;"),
        (Inst::CvtPack { fmt: HalfFmt::F16, d: x[0], hi: f[1], lo: f[0] }, "cvt.rn.f16x2.f32 %r0, %f1, %f0;"),
        (Inst::CvtPack { fmt: HalfFmt::Bf16, d: x[0], hi: f[1], lo: f[0] }, "cvt.rn.bf16x2.f32 %r0, %f1, %f0;"),
        (Inst::CvtaGlobal { d: rd[1], a: rd[0] }, "cvta.to.global.u64 %rd1, %rd0;"),
        (Inst::LdParam { ty: Ty::U64, d: rd[0].into(), param: "q".into() }, "ld.param.u64 %rd0, [q];"),
        (Inst::LdParam { ty: Ty::U32, d: x[0].into(), param: "n".into() }, "ld.param.u32 %r0, [n];"),
        (Inst::LdParam { ty: Ty::F32, d: f[0].into(), param: "scale".into() }, "ld.param.f32 %f0, [scale];"),
        (Inst::MovParamAddr { d: rd[0], param: "tmap".into() }, "mov.b64 %rd0, tmap;"),
        // -- loads and stores: spaces, cache operators, vector widths, offsets --
        (ld(Space::Global, LdCache::Default, Ty::B32, vec![x[0].into()], Addr::Global(rd[0], 0)), "ld.global.b32 %r0, [%rd0];"),
        (ld(Space::Global, LdCache::NonCoherent, Ty::B32, x[..4].iter().map(|&v| v.into()).collect(), Addr::Global(rd[0], 64)), "ld.global.nc.v4.b32 {%r0, %r1, %r2, %r3}, [%rd0+64];"),
        (ld(Space::Global, LdCache::NonCoherent, Ty::F32, vec![f[0].into(), f[1].into()], Addr::Global(rd[0], -8)), "ld.global.nc.v2.f32 {%f0, %f1}, [%rd0+-8];"),
        (ld(Space::Shared, LdCache::Default, Ty::F32, vec![f[0].into(), f[1].into()], Addr::Shared(x[4], 16)), "ld.shared.v2.f32 {%f0, %f1}, [%r4+16];"),
        (ld(Space::Shared, LdCache::Default, Ty::B16, vec![x[0].into()], Addr::Shared(x[4], 2)), "ld.shared.b16 %r0, [%r4+2];"),
        (Inst::St { space: Space::Global, ty: Ty::F32, src: vec![f[0].into()], addr: Addr::Global(rd[0], 32) }, "st.global.f32 [%rd0+32], %f0;"),
        (Inst::St { space: Space::Global, ty: Ty::B32, src: x[..4].iter().map(|&v| v.into()).collect(), addr: Addr::Global(rd[0], 0) }, "st.global.v4.b32 [%rd0], {%r0, %r1, %r2, %r3};"),
        (Inst::St { space: Space::Shared, ty: Ty::B32, src: vec![x[0].into(), x[1].into()], addr: Addr::Shared(x[4], 0) }, "st.shared.v2.b32 [%r4], {%r0, %r1};"),
        (Inst::St { space: Space::Global, ty: Ty::B16, src: vec![x[0].into()], addr: Addr::Global(rd[0], 2) }, "st.global.b16 [%rd0+2], %r0;"),
        // -- cp.async: .ca 4/8/16, .cg 16, zero-fill src-size as register and immediate --
        (cp(CpCache::Ca, CpSize::B4, None, &r), "cp.async.ca.shared.global [%r0], [%rd0], 4;"),
        (cp(CpCache::Ca, CpSize::B8, None, &r), "cp.async.ca.shared.global [%r0], [%rd0], 8;"),
        (cp(CpCache::Ca, CpSize::B16, None, &r), "cp.async.ca.shared.global [%r0], [%rd0], 16;"),
        (cp(CpCache::Cg, CpSize::B16, None, &r), "cp.async.cg.shared.global [%r0], [%rd0], 16;"),
        (cp(CpCache::Cg, CpSize::B16, Some(r2), &r), "cp.async.cg.shared.global [%r0], [%rd0], 16, %r2;"),
        (cp(CpCache::Cg, CpSize::B16, Some(int(0)), &r), "cp.async.cg.shared.global [%r0], [%rd0], 16, 0;"),
        (Inst::CpAsyncCommit, "cp.async.commit_group;"),
        (Inst::CpAsyncWait { pending: 0 }, "cp.async.wait_group 0;"),
        (Inst::CpAsyncWait { pending: 1 }, "cp.async.wait_group 1;"),
        // -- tensor cores --
        (ldm(LdmNum::X1, false, &r), "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r0}, [%r4+256];"),
        (ldm(LdmNum::X1, true, &r), "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r0}, [%r4+256];"),
        (ldm(LdmNum::X2, false, &r), "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r0, %r1}, [%r4+256];"),
        (ldm(LdmNum::X2, true, &r), "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r0, %r1}, [%r4+256];"),
        (ldm(LdmNum::X4, false, &r), "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r0, %r1, %r2, %r3}, [%r4+256];"),
        (ldm(LdmNum::X4, true, &r), "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r0, %r1, %r2, %r3}, [%r4+256];"),
        (mma(HalfFmt::F16), "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r0, %r1, %r2, %r3}, {%r4, %r5}, {%f4, %f5, %f6, %f7};"),
        (mma(HalfFmt::Bf16), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, {%r0, %r1, %r2, %r3}, {%r4, %r5}, {%f4, %f5, %f6, %f7};"),
        // -- warp shuffles, barriers, atomics, control flow --
        (Inst::VoteAny { d: p[1], a: p[0] }, "vote.sync.any.pred %p1, %p0, 0xffffffff;"),
        (Inst::Shfl { mode: ShflMode::Bfly, d: f[1].into(), a: f[0].into(), lane: 1, clamp: 0x1f, mask: u32::MAX }, "shfl.sync.bfly.b32 %f1, %f0, 1, 0x1f, 0xffffffff;"),
        (Inst::Shfl { mode: ShflMode::Idx, d: x[1].into(), a: x[0].into(), lane: 0, clamp: 0x1f, mask: u32::MAX }, "shfl.sync.idx.b32 %r1, %r0, 0, 0x1f, 0xffffffff;"),
        (Inst::BarSync { id: Operand::Imm(0), threads: None }, "bar.sync 0;"),
        (Inst::BarSync { id: Operand::Reg(x[2]), threads: Some(64) }, "bar.sync %r2, 64;"),
        (Inst::RedAddF32 { addr: Addr::Global(rd[0], 4), v: f[0] }, "red.global.add.f32 [%rd0+4], %f0;"),
        (Inst::AtomAddU32 { d: x[1], addr: Addr::Global(rd[0], 0), v: Operand::Imm(1), acq_rel: false }, "atom.global.add.u32 %r1, [%rd0], 1;"),
        (Inst::AtomAddU32 { d: x[1], addr: Addr::Global(rd[0], 4), v: Operand::Reg(x[2]), acq_rel: true }, "atom.acq_rel.gpu.global.add.u32 %r1, [%rd0+4], %r2;"),
        (Inst::Bra { target: label, uni: false }, "bra L0;"),
        (Inst::Bra { target: label, uni: true }, "bra.uni L0;"),
        (Inst::Ret, "ret;"),
    ]
}

/// The PTX ISA version the rows of [`ptx77_table`] need (`cvta.param`: 7.7).
pub const PTX77: &str = ".version 7.7";

/// Rows whose instructions need PTX ISA 7.7, newer than the `.version 7.0` of an sm_80
/// module (shared/docs/ptx-reference.md, section 1.1).
#[rustfmt::skip]
pub fn ptx77_table(b: &mut Builder) -> Vec<(Inst, &'static str)> {
    let r = regs(b);
    vec![
        (Inst::CvtaParam { d: r.rd[1], a: r.rd[0] }, "cvta.param.u64 %rd1, %rd0;"),
        (Inst::CvtaParam { d: r.rd[0], a: r.rd[0] }, "cvta.param.u64 %rd0, %rd0;"),
    ]
}

/// Both tables, from one builder's registers.
pub fn all_rows(b: &mut Builder) -> Vec<(Inst, &'static str)> {
    let mut rows = table(b);
    rows.extend(ptx77_table(&mut Builder::new()));
    rows
}
