//! ptxas on tile variants that are not in the table but are kept buildable for tuning
//! (`flash-codegen emit --tile ...`): the d128 backward main pass on 8 warps x 128 keys
//! without `exchange` (the table's row before the exchange layout, measured correct on the H200,
//! docs/history/). Tuning rows are a value handed to generation: nothing else sees them.

mod codegen_support;
use codegen_support as common;

use flash_codegen::{KernelSpec, Pass, Sm80Layout, Tiling, Tuning};

#[test]
fn eight_warp_layout_assembles_with_no_spills() {
    let Some(ptxas) = common::ptxas_or_skip("eight_warp_layout_assembles_with_no_spills") else {
        return;
    };
    let tuning = Tuning::parse(&["bwd:128=64,128,8,2,1"]).unwrap();
    let mut failures = Vec::new();
    for spec in KernelSpec::all() {
        // (overrides replace standard rows; the long row is its own)
        if spec.pass != Pass::Bwd || spec.head_dim != 128 || spec.tiling != Tiling::Standard {
            continue;
        }
        let t = *spec.tiles_tuned(&tuning).sm80();
        assert!(t.layout == Sm80Layout::Streamed && t.warps == 8);
        let ptx = flash_codegen::generate_tuned(&spec, &tuning);
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

/// A tuning row reaches the kernel it replaces (its block, its shared memory, the
/// manifest's tiles) and nothing else: the same spec without the tuning, and every other
/// spec, generate what they always do.
#[test]
fn tuning_is_a_value_that_reaches_only_its_kernel() {
    let tuning = Tuning::parse(&["bwd:128=64,128,8,2,1"]).unwrap();
    let spec: KernelSpec = "fa2_bwd_d128_bf16_sm80".parse().unwrap();
    let tuned = flash_codegen::generate_tuned(&spec, &tuning);
    assert!(tuned.contains(".maxntid 256, 1, 1"), "8 warps");
    let plan = spec.plan(&tuning);
    assert!(tuned.contains(&format!("smem {} bytes", plan.smem.bytes)));
    let untuned = flash_codegen::generate(&spec);
    assert_ne!(tuned, untuned);
    assert!(
        untuned.contains(".maxntid 128, 1, 1"),
        "the table's 4 warps"
    );
    let m = flash_codegen::manifest::manifest_tuned(&[spec], &tuning);
    assert_eq!(m.kernels[0].tiles, plan.tiles);
    assert_eq!(m.kernels[0].launch.dynamic_smem_bytes, plan.smem.bytes);
    let other: KernelSpec = "fa2_fwd_d128_bf16_sm80".parse().unwrap();
    assert_eq!(
        flash_codegen::generate_tuned(&other, &tuning),
        flash_codegen::generate(&other)
    );
}
