//! Printer table: one (instruction, exact text) row per instruction form of the IR, each
//! checked against the PTX ISA syntax (shared/docs/ptx-reference.md), plus a small entry
//! for the module header, parameters, directives, guards, labels and comments. The whole
//! table is also assembled by ptxas when it is available (the rows that need a newer PTX
//! ISA than the module declares, in a table of their own, under the version they need).

mod codegen_support;
mod printer_support;
use codegen_support as common;
use printer_support::{PTX77, all_rows, ptx77_table, table};

use std::collections::BTreeSet;

use flash_codegen::ptx::inst::{AluOp, CpSize, LdmNum, MmaKind, VecWidth, regs_of};
use flash_codegen::ptx::{
    Addr, AnyReg, B32, Builder, Cmp, Entry, HalfFmt, Inst, LaunchBounds, LdCache, Module, Param,
    ParamTy, Reg, Space, Special, Stmt, Target, Ty, print,
};

/// Every row prints exactly as expected.
#[test]
fn every_instruction_form_prints_as_the_isa_writes_it() {
    let mut b = Builder::new();
    let mut bad = Vec::new();
    for (inst, want) in all_rows(&mut b) {
        let got = print::inst(&inst);
        if got != want {
            bad.push(format!("  want {want}\n  got  {got}"));
        }
    }
    assert!(bad.is_empty(), "printer mismatches:\n{}", bad.join("\n"));
}

/// `regs_of` names exactly the registers each printed form mentions.
#[test]
fn regs_of_matches_every_printed_form() {
    let mut b = Builder::new();
    for (inst, text) in all_rows(&mut b) {
        let ir: BTreeSet<(String, u32)> = regs_of(&inst)
            .iter()
            .map(|r| (common::prefix(r.class()).to_string(), r.id()))
            .collect();
        let printed: BTreeSet<(String, u32)> = common::regs_in_line(text).into_iter().collect();
        assert_eq!(ir, printed, "regs_of disagrees with `{text}`");
    }
}

/// The table covers every AluOp, LdmNum x trans, CpSize, vec width and mma format.
#[test]
fn table_covers_every_form() {
    let mut b = Builder::new();
    let rows = all_rows(&mut b);
    let has = |f: &dyn Fn(&Inst) -> bool| rows.iter().any(|(i, _)| f(i));
    use AluOp::*;
    for op in [
        Add, Sub, Mul, MulLo, MulWide, MadLo, MadWide, Fma, Min, Max, Neg, Abs, And, Or, Xor, Not,
        Shl, Shr, Div, Rem, Ex2, Lg2, Rcp, Tanh,
    ] {
        assert!(
            has(&|i| matches!(i, Inst::Alu { op: o, .. } if *o == op)),
            "{op:?}"
        );
    }
    for w in [VecWidth::V1, VecWidth::V2, VecWidth::V4] {
        let n = match w {
            VecWidth::V1 => 1,
            VecWidth::V2 => 2,
            VecWidth::V4 => 4,
        };
        assert!(
            has(&|i| matches!(i, Inst::Ld { d, .. } if d.len() == n)),
            "ld {w:?}"
        );
        assert!(
            has(&|i| matches!(i, Inst::St { src, .. } if src.len() == n)),
            "st {w:?}"
        );
    }
    for size in [CpSize::B4, CpSize::B8, CpSize::B16] {
        assert!(has(
            &|i| matches!(i, Inst::CpAsync { size: s, .. } if *s == size)
        ));
    }
    for num in [LdmNum::X1, LdmNum::X2, LdmNum::X4] {
        for t in [false, true] {
            assert!(has(
                &|i| matches!(i, Inst::Ldmatrix { num: n, trans, .. } if *n == num && *trans == t)
            ));
        }
    }
    for h in [HalfFmt::F16, HalfFmt::Bf16] {
        assert!(has(
            &|i| matches!(i, Inst::Mma(m) if m.kind == MmaKind::M16N8K16F32(h))
        ));
    }
    for c in [LdCache::Default, LdCache::NonCoherent] {
        assert!(has(&|i| matches!(i, Inst::Ld { cache, .. } if *cache == c)));
    }
    assert!(has(&|i| matches!(i, Inst::MovParamAddr { .. })));
    assert!(has(&|i| matches!(i, Inst::CvtaParam { .. })));
}

/// A small entry: header, dynamic smem symbol, params, launch bounds, register
/// declarations, a comment, guards `@%p` / `@!%p`, a label and the final `ret`.
fn small_module() -> Module {
    let mut b = Builder::new();
    b.comment("guards, labels, comments");
    let q = b.ld_param(&Param {
        name: "q".into(),
        ty: Ty::U64,
    });
    let AnyReg::B64(q) = q else { unreachable!() };
    let tid = b.special(Special::TidX);
    let p = b.setp_u32(Cmp::Lt, tid, 16u32);
    let done = b.label();
    b.bra_if(p, true, done, false);
    let v = b.mov(1.5f32);
    b.when(p, false, |b| {
        b.st(Space::Global, Ty::F32, Addr::Global(q, 0), &[v])
    });
    b.place(done);
    let entry = b.finish(
        "small",
        vec![
            Param {
                name: "q".into(),
                ty: Ty::U64,
            },
            Param {
                name: "n".into(),
                ty: Ty::U32,
            },
        ],
        LaunchBounds {
            max_threads: Some(128),
            min_ctas_per_sm: Some(1),
            exact_threads: false,
        },
    );
    Module {
        target: Target::Sm80,
        entries: vec![entry],
    }
}

#[test]
fn module_header_entry_guards_labels_comments() {
    let want = format!(
        "// Generated by flash-ptx {}. Do not edit.
.version 7.0
.target sm_80
.address_size 64

.extern .shared .align 1024 .b8 smem[];

.visible .entry small(
    .param .u64 q,
    .param .u32 n
)
.maxntid 128, 1, 1
.minnctapersm 1
{{
    .reg .pred %p<1>;
    .reg .b32 %r<1>;
    .reg .f32 %f<1>;
    .reg .b64 %rd<1>;
    // guards, labels, comments
    ld.param.u64 %rd0, [q];
    mov.u32 %r0, %tid.x;
    setp.lt.u32 %p0, %r0, 16;
    @!%p0 bra L0;
    mov.f32 %f0, 0f3FC00000;
    @%p0 st.global.f32 [%rd0], %f0;
L0:
    ret;
}}
",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(print::module(&small_module()), want);
}

/// The whole table, as one entry, assembles with ptxas for sm_80: every form the printer
/// can write is one ptxas accepts.
#[test]
fn every_form_assembles_with_ptxas() {
    let Some(ptxas) = common::ptxas_or_skip("every_form_assembles_with_ptxas") else {
        return;
    };
    let mut b = Builder::new();
    let rows = table(&mut b);
    let mut entry: Entry = b.finish(
        "printer_table",
        vec![
            Param::scalar("q", Ty::U64).into(),
            Param::scalar("n", Ty::U32).into(),
            Param {
                name: "scale".into(),
                ty: Ty::F32,
            }
            .into(),
            Param::bytes("tmap", 64, 128),
        ],
        LaunchBounds {
            max_threads: Some(32),
            min_ctas_per_sm: None,
            exact_threads: false,
        },
    );
    let ret = entry.body.pop().expect("finish appends ret");
    let label = rows.iter().find_map(|(i, _)| match i {
        Inst::Bra { target, .. } => Some(*target),
        _ => None,
    });
    entry.body.extend(
        rows.into_iter()
            .map(|(inst, _)| Stmt::Inst { guard: None, inst }),
    );
    entry.body.push(Stmt::Label(label.expect("a bra row")));
    entry.body.push(ret);
    let ptx = print::module(&Module {
        target: Target::Sm80,
        entries: vec![entry],
    });
    for arch in ["sm_80", "sm_90"] {
        if let Err(log) = common::assemble(&ptxas, "printer_table", arch, &ptx) {
            panic!("ptxas -arch={arch} rejected the printer table:\n{log}\n{ptx}");
        }
    }
}

/// An entry with a by-value struct parameter: `.param .align 64 .b8 tmap[128]` next to the
/// scalars, read through its generic address (`Builder::param_addr`, the `mov.b64` /
/// `cvta.param.u64` pair nvcc 13 emits).
fn tensor_map_entry() -> Entry {
    let q = Param::scalar("q", Ty::U64);
    let tmap = Param::bytes("tmap", 64, 128);
    assert_eq!(
        tmap.ty,
        ParamTy::Bytes {
            align: 64,
            size: 128
        }
    );
    let mut b = Builder::new();
    b.ld_param(&q);
    let at = b.param_addr(&tmap);
    let _word: [Reg<B32>; 1] = b.ld(
        Space::Global,
        LdCache::Default,
        Ty::B32,
        Addr::Global(at, 0),
    );
    b.finish("tensor_map", vec![q.into(), tmap], LaunchBounds::default())
}

#[test]
fn by_value_struct_params_and_their_address() {
    let mut s = String::new();
    print::write_entry(&mut s, &tensor_map_entry()).unwrap();
    let want = ".visible .entry tensor_map(
    .param .u64 q,
    .param .align 64 .b8 tmap[128]
)
{
    .reg .b32 %r<1>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd0, [q];
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd1, %rd1;
    ld.global.b32 %r0, [%rd1];
    ret;
}
";
    assert_eq!(s, want);
}

#[test]
#[should_panic(expected = "generator bug: ld_param of tmap, 128 bytes aligned to 64")]
fn ld_param_of_a_by_value_struct_is_a_generator_bug() {
    Builder::new().ld_param(&Param::bytes("tmap", 64, 128));
}

/// The PTX 7.7 rows and the tensor-map entry assemble with ptxas under `.version 7.7`
/// (the sm_80 target declares 7.0, where ptxas rejects `cvta.param`).
#[test]
fn ptx77_forms_assemble_with_ptxas() {
    let Some(ptxas) = common::ptxas_or_skip("ptx77_forms_assemble_with_ptxas") else {
        return;
    };
    let mut b = Builder::new();
    let rows = ptx77_table(&mut b);
    let mut entry = b.finish(
        "ptx77_table",
        vec![Param::bytes("tmap", 64, 128)],
        LaunchBounds::default(),
    );
    let ret = entry.body.pop().expect("finish appends ret");
    entry.body.extend(
        rows.into_iter()
            .map(|(inst, _)| Stmt::Inst { guard: None, inst }),
    );
    entry.body.push(ret);
    let ptx = print::module(&Module {
        target: Target::Sm80,
        entries: vec![entry, tensor_map_entry()],
    });
    assert!(
        ptx.contains(".version 7.0\n"),
        "the sm_80 header changed:\n{ptx}"
    );
    let ptx = ptx.replace(".version 7.0\n", &format!("{PTX77}\n"));
    for arch in ["sm_80", "sm_90"] {
        if let Err(log) = common::assemble(&ptxas, "ptx77_table", arch, &ptx) {
            panic!("ptxas -arch={arch} rejected the PTX 7.7 rows:\n{log}\n{ptx}");
        }
    }
}
