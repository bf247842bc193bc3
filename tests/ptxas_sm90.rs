//! ptxas `-arch=sm_90a` on the Hopper kernels (issue 22): every variant of the first
//! forward (`kernels::sm90::fwd`: both dtypes, d64 with 3 and 2 consumers, d128, causal
//! or not, every schedule of `Variant::SCHEDULES`) assembles with 0 spill bytes, no stack
//! frame and no wgmma serialisation (ptxas notes C7510 / C7520); its debug builds
//! (bounded mbarrier waits failing through `__assertfail`) assemble too, the call's ABI
//! costing them a small stack frame and a few spilled bytes (printed; debug builds only). The bounded waits' own PTX
//! (`__assertfail` with the barrier's name, declared once per module) is checked here too.

mod codegen_support;
use codegen_support as common;

use flash_codegen::DType;
use flash_codegen::kernels::sm90::fwd;
use flash_codegen::ptx::{Addr, Builder, Inst, LaunchBounds, Module, Param, Target, print};

#[test]
fn every_sm90_forward_assembles_with_no_spills() {
    let Some(ptxas) = common::ptxas_or_skip("every_sm90_forward_assembles_with_no_spills") else {
        return;
    };
    let mut bad = Vec::new();
    for var in fwd::Variant::all() {
        let (name, ptx) = (var.name(), print::module(&fwd::module(var)));
        match common::assemble_log(&ptxas, &name, "sm_90a", &ptx) {
            Ok((r, log)) => {
                println!("{name}: {r:?}, smem {}", var.smem_bytes());
                let clean = (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0);
                // C7510 / C7520: ptxas serialised the wgmmas (no overlap left)
                let serialised = log.contains("C7510") || log.contains("C7520");
                if !var.debug && (!clean || serialised) {
                    bad.push(format!("{name}: {r:?}\n{log}"));
                }
            }
            Err(log) => bad.push(format!("{name}: ptxas rejected it:\n{log}")),
        }
    }
    assert_eq!(fwd::Variant::all().len(), 318);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The Hopper probe kernel (`kernels::sm90::probe`, run by tests/gpu_probe_sm90.rs)
/// assembles for sm_90a with 0 spills and no stack, for both dtypes.
#[test]
fn the_sm90_probe_assembles_for_both_dtypes() {
    use flash_codegen::kernels::sm90::probe;
    let Some(ptxas) = common::ptxas_or_skip("the_sm90_probe_assembles_for_both_dtypes") else {
        return;
    };
    for dtype in [DType::F16, DType::Bf16] {
        let ptx = print::module(&probe::module(dtype));
        assert_eq!(ptx.matches("wgmma.mma_async").count(), 8, "{ptx}");
        assert_eq!(ptx.matches("cp.async.bulk.tensor").count(), 5, "{ptx}");
        match common::assemble(&ptxas, &probe::entry_name(dtype), "sm_90a", &ptx) {
            Ok(r) => {
                println!("{}: {r:?}", probe::entry_name(dtype));
                assert_eq!(
                    (r.spill_stores, r.spill_loads, r.stack_frame),
                    (0, 0, 0),
                    "{r:?}"
                );
            }
            Err(log) => panic!("ptxas -arch=sm_90a rejected the probe:\n{log}\n{ptx}"),
        }
    }
}

/// `trap` and `__assertfail` (what a debug build's bounded mbarrier wait fails with): the
/// message is a module-scope string declared once however many entries use it, and the
/// bounded wait counts its spins before failing.
#[test]
fn bounded_waits_fail_naming_the_barrier() {
    let entry = |name: &str| {
        let mut b = Builder::new();
        b.bound_waits(64);
        let smem = b.smem_base();
        b.mbarrier_wait(Addr::Shared(smem, 0), 0u32, "K_full[0]");
        b.finish(name, Vec::<Param>::new(), LaunchBounds::default())
    };
    let m = Module {
        target: Target::Sm90a,
        entries: vec![entry("one"), entry("two")],
    };
    let ptx = print::module(&m);
    let text = "flash-ptx: mbarrier `K_full[0]` timed out (64 waits)";
    assert_eq!(m.entries[0].strings.len(), 1);
    assert_eq!(m.entries[0].strings[0].1, text);
    assert_eq!(
        ptx.matches(".extern .func __assertfail(").count(),
        1,
        "{ptx}"
    );
    assert_eq!(
        ptx.matches(".global .align 1 .b8 flash_msg_").count(),
        1,
        "{ptx}"
    );
    let bytes: Vec<String> = text.bytes().chain([0]).map(|c| c.to_string()).collect();
    assert!(ptx.contains(&bytes.join(", ")), "{ptx}");
    assert_eq!(ptx.matches("call __assertfail").count(), 2, "{ptx}");
    assert_eq!(ptx.matches("trap;").count(), 2, "{ptx}");
    assert!(ptx.contains("setp.lt.u32") && ptx.contains("64;"), "{ptx}");
    assert_eq!(print::inst(&Inst::Trap), "trap;");
    if let Some(ptxas) = common::ptxas_or_skip("bounded_waits_fail_naming_the_barrier") {
        if let Err(log) = common::assemble(&ptxas, "bounded_waits", "sm_90a", &ptx) {
            panic!("ptxas -arch=sm_90a rejected the bounded waits:\n{log}\n{ptx}");
        }
    }
}
