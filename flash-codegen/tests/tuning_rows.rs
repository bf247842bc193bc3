//! Every sm_80 tile row the rules accept generates its kernel: `Sm80Tiles::check` is the
//! one place the geometry is refused, so no accepted tuning row may reach a generator
//! assertion. A grid of rows around the table's, for every pass with tiles and head dim.

use std::panic::{AssertUnwindSafe, catch_unwind};

use flash_codegen::spec::check;
use flash_codegen::{DType, KernelSpec, Mask, Pass, Tiling, Tuning};

#[test]
fn every_accepted_row_generates() {
    // the flags of each layout (Sm80Layout: streamed, resident, exchange, late prefetch)
    let layouts = ["", ",resident", ",exchange", ",exchange,late"];
    let (mut accepted, mut failures) = (0, Vec::new());
    for pass in [Pass::Fwd, Pass::Bwd, Pass::BwdDq] {
        for d in flash_codegen::spec::HEAD_DIMS {
            for bm in [16, 32, 64, 128] {
                for bn in [16, 32, 64, 128] {
                    for warps in [1, 2, 4, 8] {
                        for stages in [1, 2] {
                            for sweeps in [1, 2] {
                                for flags in layouts {
                                    let row = format!(
                                        "{}:{d}={bm},{bn},{warps},{stages},{sweeps}{flags}",
                                        pass.name()
                                    );
                                    let Ok(tuning) = Tuning::parse(&[row.as_str()]) else {
                                        continue;
                                    };
                                    accepted += 1;
                                    let spec = KernelSpec {
                                        pass,
                                        head_dim: d,
                                        dtype: DType::Bf16,
                                        mask: Mask::Causal,
                                        scores: flash_codegen::Scores::Plain,
                                        tiling: Tiling::Standard,
                                        arch: flash_codegen::Arch::Sm80,
                                    };
                                    let t = spec.tiles_tuned(&tuning);
                                    assert_eq!(check(pass, d, &t), Ok(()), "{row}");
                                    let generated = catch_unwind(AssertUnwindSafe(|| {
                                        flash_codegen::generate_tuned(&spec, &tuning)
                                    }));
                                    if generated.is_err() {
                                        failures.push(row);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        accepted > 500,
        "only {accepted} rows accepted: the grid tests little"
    );
    assert!(
        failures.is_empty(),
        "accepted rows that do not generate:\n{}",
        failures.join("\n")
    );
}
