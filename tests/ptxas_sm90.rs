//! ptxas `-arch=sm_90a` on the Hopper kernels (issue 22): every variant of the first
//! forward (`kernels::sm90::fwd`: both dtypes, d64 and d128, causal or not) assembles with
//! 0 spill bytes and no stack frame; its debug builds (bounded mbarrier waits failing
//! through `__assertfail`) assemble too, the call's ABI costing them a small stack frame
//! and a few spilled bytes (printed; debug builds only).

mod codegen_support;
use codegen_support as common;

use flash_codegen::DType;
use flash_codegen::kernels::sm90::fwd;
use flash_codegen::ptx::print;

#[test]
fn every_sm90_forward_assembles_with_no_spills() {
    let Some(ptxas) = common::ptxas_or_skip("every_sm90_forward_assembles_with_no_spills") else {
        return;
    };
    let mut bad = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        for d in fwd::HEAD_DIMS {
            for causal in [false, true] {
                for debug in [false, true] {
                    let name = fwd::entry_name(dtype, d, causal, debug);
                    let ptx = print::module(&fwd::module(dtype, d, causal, debug));
                    match common::assemble(&ptxas, &name, "sm_90a", &ptx) {
                        Ok(r) => {
                            println!("{name} debug={debug}: {r:?}, smem {}", fwd::smem_bytes(d));
                            let clean = (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0);
                            if !debug && !clean {
                                bad.push(format!("{name} debug={debug}: {r:?}"));
                            }
                        }
                        Err(log) => {
                            bad.push(format!("{name} debug={debug}: ptxas rejected it:\n{log}"))
                        }
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
