//! Properties: spec names round-trip, generation is deterministic, every register the
//! PTX uses is declared (and the IR's own register listing agrees with the text), the
//! mma fragment maps and the shared-memory swizzle are bijections onto their tiles.

mod codegen_support;
use codegen_support as common;

use std::collections::{BTreeMap, BTreeSet};

use flash_codegen::kernels::{self, sm80::probe};
use flash_codegen::ptx::inst::regs_of;
use flash_codegen::ptx::{Module, RegClass, Stmt, print};
use flash_codegen::spec::HEAD_DIMS;
use flash_codegen::tile::frag::{a_frag, b_frag, c_frag};
use flash_codegen::tile::smem::SmemTile;
use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Tiling, Tuning};
use proptest::prelude::*;
use proptest::sample::select;

fn spec() -> impl Strategy<Value = KernelSpec> {
    (
        select(Pass::ALL.to_vec()),
        select(HEAD_DIMS.to_vec()),
        select(DType::ALL.to_vec()),
        any::<bool>(),
        select(Arch::ALL.to_vec()),
        any::<bool>(),
    )
        .prop_map(|(pass, head_dim, dtype, causal, arch, long)| {
            let spec = KernelSpec {
                pass,
                head_dim,
                dtype,
                // elementwise passes have no causal variant
                mask: Mask::causal(causal && pass.has_mask()),
                scores: flash_codegen::Scores::Plain,
                tiling: Tiling::Standard,
                arch,
            };
            // the long tiling where the pass and head dim have one
            match long && spec.long_from().is_some() {
                true => KernelSpec {
                    tiling: Tiling::Long,
                    ..spec
                },
                false => spec,
            }
        })
}

proptest! {
    #[test]
    fn spec_names_round_trip(s in spec()) {
        prop_assert_eq!(s.name().parse::<KernelSpec>(), Ok(s));
        prop_assert!(KernelSpec::all().contains(&s));
    }

    /// Whatever parses is canonical: its name is the string it was parsed from.
    #[test]
    fn parsed_names_are_canonical(
        name in "fa2_(fwd|bwd|bwdpre|bwddq|bwdpost)_d[1-9][0-9]{1,2}_(f16|bf16|fp8)(_causal|_masked)?_sm[89]0"
    ) {
        if let Ok(s) = name.parse::<KernelSpec>() {
            prop_assert_eq!(s.name(), name);
        }
    }

    #[test]
    fn any_string_parses_or_errs_without_panicking(s in "\\PC{0,40}") {
        let _ = s.parse::<KernelSpec>();
    }

    #[test]
    fn generation_is_deterministic(s in spec()) {
        prop_assert_eq!(flash_codegen::generate(&s), flash_codegen::generate(&s));
    }

    /// FA2's 64-column panels: every (row, 16-byte chunk) lands on its own 16-byte slot and
    /// the slots tile the buffer exactly.
    #[test]
    fn smem_swizzle_is_a_bijection(rows8 in 1u32..=16, panels in 1u32..=4, base in 0u32..4) {
        let t = SmemTile::new(base * 1024, rows8 * 8, panels * 64);
        let mut seen = BTreeSet::new();
        for row in 0..t.rows {
            for chunk in 0..t.cols / 8 {
                let off = t.offset(row, chunk);
                prop_assert_eq!(off % 16, 0);
                prop_assert!(off < t.bytes(), "({row}, {chunk}) -> {off}");
                prop_assert!(seen.insert(off), "({row}, {chunk}) -> {off} twice");
            }
        }
        prop_assert_eq!(seen.len() as u32 * 16, t.bytes());
    }
}

/// Every module the project emits, as IR.
fn all_ir() -> Vec<Module> {
    let mut v: Vec<Module> = KernelSpec::all()
        .iter()
        .map(|s| kernels::module(&s.plan(&Tuning::NONE)))
        .collect();
    v.extend(DType::ALL.map(probe::module));
    v
}

/// Every `%rK`, `%fK`, `%rdK`, `%pK` in the printed PTX has K < N of its `.reg` line.
#[test]
fn every_used_register_is_declared() {
    for (name, ptx) in common::all_modules() {
        let declared = common::declared_regs(&ptx);
        for (prefix, k) in common::used_regs(&ptx) {
            let n = declared.get(&prefix).copied().unwrap_or(0);
            assert!(k < n, "{name}: {prefix}{k} used, {prefix}<{n}> declared");
        }
    }
}

/// `regs_of` lists exactly the registers the printer writes for each instruction (guards
/// included), all below the entry's declared counts, and the declared counts are the
/// ones the printed `.reg` lines carry.
#[test]
fn ir_register_listing_agrees_with_the_text() {
    for m in all_ir() {
        let ptx = print::module(&m);
        let declared = common::declared_regs(&ptx);
        for e in &m.entries {
            for c in RegClass::ALL {
                let n = declared.get(common::prefix(c)).copied().unwrap_or(0);
                assert_eq!(e.declared(c), n, "{}: {c:?} count", e.name);
            }
            for stmt in &e.body {
                let Stmt::Inst { guard, inst } = stmt else {
                    continue;
                };
                let mut ir: BTreeSet<(String, u32)> = regs_of(inst)
                    .iter()
                    .map(|r| (common::prefix(r.class()).to_string(), r.id()))
                    .collect();
                if let Some(g) = guard {
                    ir.insert(("%p".to_string(), g.pred.id()));
                }
                let text = print::inst(inst);
                let mut printed: BTreeSet<(String, u32)> =
                    common::regs_in_line(&text).into_iter().collect();
                if let Some(g) = guard {
                    printed.insert(("%p".to_string(), g.pred.id()));
                }
                assert_eq!(ir, printed, "{}: regs_of disagrees with `{text}`", e.name);
                for (p, k) in &ir {
                    let n = declared.get(p).copied().unwrap_or(0);
                    assert!(*k < n, "{}: {p}{k} beyond {p}<{n}>", e.name);
                }
            }
        }
    }
}

/// Maps (lane, reg, half) through `f` and checks it hits every cell of a rows x cols tile
/// exactly once.
fn assert_bijection(
    what: &str,
    regs: u32,
    halves: u32,
    rows: u32,
    cols: u32,
    f: impl Fn(u32, u32, u32) -> (u32, u32),
) {
    let mut seen: BTreeMap<(u32, u32), (u32, u32, u32)> = BTreeMap::new();
    for lane in 0..32 {
        for reg in 0..regs {
            for half in 0..halves {
                let (r, c) = f(lane, reg, half);
                assert!(
                    r < rows && c < cols,
                    "{what}: lane {lane} reg {reg} half {half} -> ({r}, {c})"
                );
                if let Some(prev) = seen.insert((r, c), (lane, reg, half)) {
                    panic!(
                        "{what}: ({r}, {c}) from {prev:?} and {:?}",
                        (lane, reg, half)
                    );
                }
            }
        }
    }
    assert_eq!(
        seen.len() as u32,
        rows * cols,
        "{what} does not cover its tile"
    );
}

#[test]
fn a_fragment_is_a_bijection_onto_16x16() {
    assert_bijection("A", 4, 2, 16, 16, |l, i, h| {
        let c = a_frag(i, h);
        (c.row.eval(l), c.col.eval(l))
    });
}

#[test]
fn b_fragment_is_a_bijection_onto_16x8() {
    assert_bijection("B", 2, 2, 16, 8, |l, i, h| {
        let c = b_frag(i, h);
        (c.row.eval(l), c.col.eval(l))
    });
}

#[test]
fn c_fragment_is_a_bijection_onto_16x8() {
    assert_bijection("C", 4, 1, 16, 8, |l, i, _| {
        let c = c_frag(i);
        (c.row.eval(l), c.col.eval(l))
    });
}
