//! ptxas on tile variants that are not in the table but are kept buildable for tuning
//! (`flash-codegen emit --tile ...`): the d128 backward main pass on 8 warps x 128 keys
//! without `exchange` (the table's row until session 5, measured correct on the H200,
//! docs/performance.md). Its own test binary: tile overrides are process-wide.

mod codegen_support;
use codegen_support as common;

use flash_codegen::spec::{parse_override, set_overrides};
use flash_codegen::{DType, KernelSpec, Pass, Tiling};

#[test]
fn eight_warp_layout_assembles_with_no_spills() {
    let Some(ptxas) = common::ptxas_or_skip("eight_warp_layout_assembles_with_no_spills") else {
        return;
    };
    set_overrides(vec![parse_override("bwd:128=64,128,8,2,1").unwrap()]);
    let mut failures = Vec::new();
    for spec in KernelSpec::all() {
        // (overrides replace standard rows; the long row is its own)
        if spec.pass != Pass::Bwd || spec.head_dim != 128 || spec.tiling != Tiling::Standard {
            continue;
        }
        assert!(!spec.tiles().exchange && spec.tiles().warps == 8);
        assert!(spec.dtype == DType::F16 || spec.dtype == DType::Bf16);
        let ptx = flash_codegen::generate(&spec);
        for arch in ["sm_80", "sm_90"] {
            match common::assemble(&ptxas, &spec.name(), arch, &ptx) {
                Ok(r) if r.stack_frame == 0 && r.spill_stores == 0 && r.spill_loads == 0 => {}
                Ok(r) => failures.push(format!("{} ({arch}): {r:?}", spec.name())),
                Err(log) => failures.push(format!("{} ({arch}): {log}", spec.name())),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
