//! Printer table of the Hopper families (issue 22): one (instruction, exact text) row per
//! form of `wgmma`, `mbarrier`, TMA, the proxy fences, `setmaxnreg`, `elect.sync`,
//! `stmatrix` and `bar.arrive`, each as the PTX ISA and shared/docs/ptx-reference.md §10
//! write it; `regs_of` against the printed registers; the whole table assembled by ptxas
//! for sm_90a under the module's own header; an sm_80 module holding one is refused; a
//! small probe entry built with the builder and the descriptor tile (`tile::desc`)
//! assembles with 0 spills.

mod codegen_support;
use codegen_support as common;

use std::collections::BTreeSet;

use flash_codegen::ptx::inst::{
    BulkOp, Fence, LdmNum, MbarrierOp, ScaleD, SetMaxNReg, TensorCoords, Wgmma, WgmmaA, WgmmaOp,
    regs_of,
};
use flash_codegen::ptx::{
    Addr, B32, B64, Builder, Entry, F32, HalfFmt, Inst, LaunchBounds, Module, Operand, Param, Pred,
    Reg, Special, Stmt, Target, print,
};
use flash_codegen::tile::desc::{Major, WgmmaDesc};
use flash_codegen::tile::smem::SmemTile;

/// The rows, from one builder's registers (%p0..1, %r0..7, %f0..63, %rd0..2).
fn table(b: &mut Builder) -> Vec<(Inst, String)> {
    let p: [Reg<Pred>; 2] = std::array::from_fn(|_| b.reg());
    let r: [Reg<B32>; 8] = std::array::from_fn(|_| b.reg());
    let f: Vec<Reg<F32>> = (0..64).map(|_| b.reg()).collect();
    let rd: [Reg<B64>; 3] = std::array::from_fn(|_| b.reg());
    let fl = |n: usize| {
        (0..n)
            .map(|i| format!("%f{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bar = Addr::Shared(r[0], 8);
    let imm = |v: i64| Operand::<B32>::Imm(v);
    let tc = |n: usize| {
        let mut c = vec![Operand::Reg(r[1]), Operand::Reg(r[2]), imm(0)];
        c.truncate(n.min(3));
        c.resize(n, imm(7));
        TensorCoords::new(rd[2], c)
    };
    let ss = |n: usize, h, trans_a, trans_b, scale_d| {
        let a = WgmmaA::Desc {
            desc: rd[0],
            trans: trans_a,
        };
        Inst::Wgmma(WgmmaOp::Mma(Wgmma::new(
            h,
            f[..n / 2].to_vec(),
            a,
            rd[1],
            trans_b,
            scale_d,
        )))
    };
    let rs = |n: usize, h, trans_b, scale_d| {
        let a = WgmmaA::Regs([r[4], r[5], r[6], r[7]]);
        let m = Wgmma::new(h, f[..n / 2].to_vec(), a, rd[1], trans_b, scale_d);
        Inst::Wgmma(WgmmaOp::Mma(m))
    };
    let w = "wgmma.mma_async.sync.aligned";
    vec![
        // -- wgmma --
        (Inst::Wgmma(WgmmaOp::Fence), "wgmma.fence.sync.aligned;".into()),
        (Inst::Wgmma(WgmmaOp::Commit), "wgmma.commit_group.sync.aligned;".into()),
        (Inst::Wgmma(WgmmaOp::Wait(1)), "wgmma.wait_group.sync.aligned 1;".into()),
        (
            ss(64, HalfFmt::Bf16, false, false, ScaleD::Imm(false)),
            format!("{w}.m64n64k16.f32.bf16.bf16 {{{}}}, %rd0, %rd1, 0, 1, 1, 0, 0;", fl(32)),
        ),
        (
            ss(128, HalfFmt::F16, false, true, ScaleD::Pred(p[1])),
            format!("{w}.m64n128k16.f32.f16.f16 {{{}}}, %rd0, %rd1, %p1, 1, 1, 0, 1;", fl(64)),
        ),
        (
            ss(8, HalfFmt::Bf16, true, false, ScaleD::Imm(true)),
            format!("{w}.m64n8k16.f32.bf16.bf16 {{{}}}, %rd0, %rd1, 1, 1, 1, 1, 0;", fl(4)),
        ),
        (
            rs(64, HalfFmt::Bf16, true, ScaleD::Imm(true)),
            format!("{w}.m64n64k16.f32.bf16.bf16 {{{}}}, {{%r4, %r5, %r6, %r7}}, %rd1, 1, 1, 1, 1;", fl(32)),
        ),
        (
            rs(16, HalfFmt::F16, false, ScaleD::Pred(p[0])),
            format!("{w}.m64n16k16.f32.f16.f16 {{{}}}, {{%r4, %r5, %r6, %r7}}, %rd1, %p0, 1, 1, 0;", fl(8)),
        ),
        // -- mbarrier --
        (
            Inst::Mbarrier(MbarrierOp::Init { bar, count: imm(1) }),
            "mbarrier.init.shared::cta.b64 [%r0+8], 1;".into(),
        ),
        (
            Inst::Mbarrier(MbarrierOp::Arrive { bar }),
            "mbarrier.arrive.shared::cta.b64 _, [%r0+8];".into(),
        ),
        (
            Inst::Mbarrier(MbarrierOp::ArriveExpectTx { bar, bytes: imm(32768) }),
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r0+8], 32768;".into(),
        ),
        (
            Inst::Mbarrier(MbarrierOp::ArriveExpectTx { bar, bytes: Operand::Reg(r[3]) }),
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r0+8], %r3;".into(),
        ),
        (
            Inst::Mbarrier(MbarrierOp::TryWaitParity { p: p[0], bar, parity: Operand::Reg(r[3]) }),
            "mbarrier.try_wait.parity.shared::cta.b64 %p0, [%r0+8], %r3;".into(),
        ),
        (
            Inst::Mbarrier(MbarrierOp::TryWaitParity { p: p[0], bar, parity: imm(1) }),
            "mbarrier.try_wait.parity.shared::cta.b64 %p0, [%r0+8], 1;".into(),
        ),
        // -- TMA --
        (
            Inst::Bulk(BulkOp::TensorLoad { dst: Addr::Shared(r[0], 1024), src: tc(2), bar }),
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r0+1024], [%rd2, {%r1, %r2}], [%r0+8];".into(),
        ),
        (
            Inst::Bulk(BulkOp::TensorLoad { dst: Addr::Shared(r[0], 2048), src: tc(4), bar }),
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%r0+2048], [%rd2, {%r1, %r2, 0, 7}], [%r0+8];".into(),
        ),
        (
            Inst::Bulk(BulkOp::TensorStore { dst: tc(3), src: Addr::Shared(r[0], 1024) }),
            "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%rd2, {%r1, %r2, 0}], [%r0+1024];".into(),
        ),
        (Inst::Bulk(BulkOp::Commit), "cp.async.bulk.commit_group;".into()),
        (
            Inst::Bulk(BulkOp::Wait { pending: 0, read: true }),
            "cp.async.bulk.wait_group.read 0;".into(),
        ),
        (
            Inst::Bulk(BulkOp::Wait { pending: 1, read: false }),
            "cp.async.bulk.wait_group 1;".into(),
        ),
        (
            Inst::Bulk(BulkOp::PrefetchTensormap { tmap: rd[2] }),
            "prefetch.tensormap [%rd2];".into(),
        ),
        // -- fences, registers, election, stmatrix, named barriers --
        (Inst::Fence(Fence::ProxyAsyncShared), "fence.proxy.async.shared::cta;".into()),
        (Inst::Fence(Fence::MbarrierInit), "fence.mbarrier_init.release.cluster;".into()),
        (
            Inst::SetMaxNReg(SetMaxNReg::new(false, 24)),
            "setmaxnreg.dec.sync.aligned.u32 24;".into(),
        ),
        (
            Inst::SetMaxNReg(SetMaxNReg::new(true, 240)),
            "setmaxnreg.inc.sync.aligned.u32 240;".into(),
        ),
        (Inst::Elect { p: p[1] }, "elect.sync _|%p1, 0xffffffff;".into()),
        (
            Inst::Stmatrix { num: LdmNum::X4, trans: false, src: r[4..8].to_vec(), addr: Addr::Shared(r[0], 0) },
            "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r0], {%r4, %r5, %r6, %r7};".into(),
        ),
        (
            Inst::Stmatrix { num: LdmNum::X2, trans: true, src: r[4..6].to_vec(), addr: Addr::Shared(r[0], 16) },
            "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%r0+16], {%r4, %r5};".into(),
        ),
        (
            Inst::Stmatrix { num: LdmNum::X1, trans: false, src: vec![r[4]], addr: Addr::Shared(r[0], 0) },
            "stmatrix.sync.aligned.m8n8.x1.shared.b16 [%r0], {%r4};".into(),
        ),
        (
            Inst::BarArrive { id: imm(2), threads: 256 },
            "bar.arrive 2, 256;".into(),
        ),
        (
            Inst::BarArrive { id: Operand::Reg(r[3]), threads: 256 },
            "bar.arrive %r3, 256;".into(),
        ),
    ]
}

#[test]
fn every_sm90_form_prints_as_the_isa_writes_it() {
    let mut bad = Vec::new();
    for (inst, want) in table(&mut Builder::new()) {
        let got = print::inst(&inst);
        if got != want {
            bad.push(format!("  want {want}\n  got  {got}"));
        }
    }
    assert!(bad.is_empty(), "printer mismatches:\n{}", bad.join("\n"));
}

#[test]
fn regs_of_matches_every_printed_sm90_form() {
    for (inst, text) in table(&mut Builder::new()) {
        let ir: BTreeSet<(String, u32)> = regs_of(&inst)
            .iter()
            .map(|r| (common::prefix(r.class()).to_string(), r.id()))
            .collect();
        let printed: BTreeSet<(String, u32)> = common::regs_in_line(&text).into_iter().collect();
        assert_eq!(ir, printed, "regs_of disagrees with `{text}`");
        assert!(inst.needs_sm90() || matches!(inst, Inst::BarArrive { .. }));
    }
}

/// The table as one sm_90a entry (with a tensor-map parameter behind %rd2).
fn table_module() -> Module {
    let mut b = Builder::new();
    let rows = table(&mut b);
    let tmap = Param::bytes("tmap", 64, 128);
    let mut entry: Entry = b.finish(
        "printer_table_sm90",
        vec![tmap],
        LaunchBounds {
            max_threads: Some(384),
            min_ctas_per_sm: Some(1),
            exact_threads: true,
        },
    );
    let ret = entry.body.pop().expect("finish appends ret");
    entry.body.extend(
        rows.into_iter()
            .map(|(inst, _)| Stmt::Inst { guard: None, inst }),
    );
    entry.body.push(ret);
    Module {
        target: Target::Sm90a,
        entries: vec![entry],
    }
}

#[test]
fn the_sm90a_header_declares_ptx_8_0() {
    let ptx = print::module(&table_module());
    assert!(
        ptx.contains("\n.version 8.0\n.target sm_90a\n.address_size 64\n"),
        "{ptx}"
    );
}

#[test]
fn an_exact_cta_size_prints_reqntid() {
    let ptx = print::module(&table_module());
    assert!(
        ptx.contains(")\n.reqntid 384, 1, 1\n.minnctapersm 1\n{"),
        "{ptx}"
    );
    assert!(!ptx.contains(".maxntid"), "{ptx}");
}

#[test]
#[should_panic(expected = "needs an sm_90 target, in an sm_80 module")]
fn an_sm90_instruction_in_an_sm80_module_is_a_generator_bug() {
    let mut m = table_module();
    m.target = Target::Sm80;
    print::module(&m);
}

#[test]
#[should_panic(expected = "wgmma m64n12k16")]
fn a_wgmma_of_an_unsupported_n_is_a_generator_bug() {
    let mut b = Builder::new();
    let acc: Vec<Reg<F32>> = (0..6).map(|_| b.reg()).collect();
    let (a, bd) = (b.reg(), b.reg());
    b.wgmma_ss(HalfFmt::Bf16, &acc, a, false, bd, false, ScaleD::Imm(true));
}

#[test]
#[should_panic(expected = "setmaxnreg 100")]
fn a_setmaxnreg_off_the_grid_is_a_generator_bug() {
    Builder::new().setmaxnreg(true, 100);
}

/// A probe entry as a kernel writes one: mbarrier init and fence, a TMA load waited on
/// by parity, the Q K^T product of a 64 x 64 tile in four SS k-steps from `tile::desc`
/// descriptors, one RS k-step, stmatrix, the proxy fence and a TMA store, with the
/// producer's and consumers' register caps behind a warpgroup-uniform branch.
fn probe_entry() -> Entry {
    let tmap = Param::bytes("tmap", 64, 128);
    let mut b = Builder::new();
    let t = b.param_addr(&tmap);
    b.prefetch_tensormap(t);
    let smem = b.smem_base();
    let tid = b.special(Special::TidX);
    let wg = b.shr_u32(tid, 7);
    let producer = b.setp_u32(flash_codegen::ptx::Cmp::Eq, wg, 0u32);
    let bar = Addr::Shared(smem, 0);
    let first = b.setp_u32(flash_codegen::ptx::Cmp::Eq, tid, 0u32);
    b.when(first, false, |b| b.mbarrier_init(bar, 1));
    b.fence_mbarrier_init();
    b.bar_sync();
    let (qt, kt) = (SmemTile::new(1024, 64, 64), SmemTile::new(9216, 64, 64));
    b.if_else_uniform(
        producer,
        |b| {
            b.setmaxnreg(false, 40);
            let leader = b.elect_one();
            let lead = b.setp_u32(flash_codegen::ptx::Cmp::Lt, tid, 32u32);
            let one = b.and_pred(leader, lead);
            b.when(one, false, |b| {
                b.mbarrier_arrive_expect_tx(bar, 2 * qt.bytes());
                let zero = || vec![Operand::Imm(0), Operand::Imm(0)];
                b.tma_load(Addr::Shared(smem, qt.base as i32), t, zero(), bar);
                b.tma_load(Addr::Shared(smem, kt.base as i32), t, zero(), bar);
            });
        },
        |b| {
            b.setmaxnreg(true, 232);
            b.mbarrier_wait(bar, 0u32, "tiles");
            let (q, k) = (WgmmaDesc::new(qt, Major::K), WgmmaDesc::new(kt, Major::K));
            let (q0, k0) = (q.emit(b, smem), k.emit(b, smem));
            let acc: Vec<Reg<F32>> = (0..32).map(|_| b.reg()).collect();
            b.wgmma_fence();
            for kk in 0..q.k_steps() {
                let (qd, kd) = (q.emit_kstep(b, q0, kk), k.emit_kstep(b, k0, kk));
                let scale = ScaleD::Imm(kk > 0);
                b.wgmma_ss(HalfFmt::Bf16, &acc, qd, false, kd, false, scale);
            }
            let frag: [Reg<B32>; 4] =
                std::array::from_fn(|i| b.pack(HalfFmt::Bf16, acc[2 * i], acc[2 * i + 1]));
            b.wgmma_rs(HalfFmt::Bf16, &acc, frag, k0, true, ScaleD::Imm(true));
            b.wgmma_commit();
            b.wgmma_wait(0);
            let out: [Reg<B32>; 4] =
                std::array::from_fn(|i| b.pack(HalfFmt::Bf16, acc[2 * i + 8], acc[2 * i + 9]));
            let row = b.shl_b32(tid, 4u32);
            let at = b.add_u32(smem, row);
            b.stmatrix(false, Addr::Shared(at, 17408), out);
            b.fence_proxy_async();
            b.bar_sync_named(tid, 256);
            b.bar_arrive(1u32, 256);
            let lead = b.setp_u32(flash_codegen::ptx::Cmp::Eq, tid, 128u32);
            b.when(lead, false, |b| {
                b.tma_store(
                    t,
                    vec![Operand::Imm(0), Operand::Imm(0)],
                    Addr::Shared(smem, 17408),
                );
            });
            b.bulk_commit();
            b.bulk_wait(0, true);
        },
    );
    b.finish(
        "probe_sm90",
        vec![tmap],
        LaunchBounds {
            max_threads: Some(384),
            min_ctas_per_sm: Some(1),
            exact_threads: false,
        },
    )
}

#[test]
fn the_sm90a_table_and_a_probe_assemble_with_ptxas() {
    let Some(ptxas) = common::ptxas_or_skip("the_sm90a_table_and_a_probe_assemble_with_ptxas")
    else {
        return;
    };
    let ptx = print::module(&table_module());
    if let Err(log) = common::assemble(&ptxas, "printer_table_sm90", "sm_90a", &ptx) {
        panic!("ptxas -arch=sm_90a rejected the sm90 table:\n{log}\n{ptx}");
    }
    let ptx = print::module(&Module {
        target: Target::Sm90a,
        entries: vec![probe_entry()],
    });
    match common::assemble(&ptxas, "probe_sm90", "sm_90a", &ptx) {
        Ok(r) => assert_eq!(
            (r.spill_stores, r.spill_loads, r.stack_frame),
            (0, 0, 0),
            "{r:?}\n{ptx}"
        ),
        Err(log) => panic!("ptxas -arch=sm_90a rejected the probe:\n{log}\n{ptx}"),
    }
}

#[test]
fn the_probe_uses_the_descriptor_tiles() {
    let ptx = print::module(&Module {
        target: Target::Sm90a,
        entries: vec![probe_entry()],
    });
    let high = WgmmaDesc::new(SmemTile::new(1024, 64, 64), Major::K).high_bits();
    assert!(ptx.contains(&format!("0x{high:X}")), "{ptx}");
    assert_eq!(ptx.matches("wgmma.mma_async").count(), 5);
}
