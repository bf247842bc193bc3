//! insta snapshots: small op-level snippets a reviewer can read, the full PTX of the probe
//! and of two representative forward kernels, one compact summary of EVERY kernel
//! (instruction counts by opcode, declared registers, dynamic shared memory), and the
//! layout of `manifest.json` for three representative kernels.
//!
//! When a kernel changes on purpose, re-accept everything with one command:
//!     INSTA_UPDATE=always cargo test --release --test snapshots
//! and review the diff of `tests/snapshots/` before committing. With CI=true a mismatch
//! fails and nothing is written.

mod codegen_support;
use codegen_support as common;

use std::collections::BTreeMap;
use std::fmt::Write;

use flash_codegen::kernels::sm80::probe;
use flash_codegen::ptx::inst::CpSize;
use flash_codegen::ptx::{
    Addr, AnyReg, B32, B64, Builder, Cmp, F32, HalfFmt, LaunchBounds, LdCache, Module, Param, Reg,
    Space, Special, Target, Ty, print,
};
use flash_codegen::{DType, KernelSpec, Tuning, abi};
use insta::assert_snapshot;

/// The generator version in the header would churn every snapshot on a release.
fn stable(ptx: &str) -> String {
    ptx.replacen(
        &format!("flash-ptx {}.", env!("CARGO_PKG_VERSION")),
        "flash-ptx [VERSION].",
        1,
    )
}

/// A snippet: the entry the builder's instructions make, without the module header.
fn snippet(name: &str, params: &[(&str, Ty)], f: impl FnOnce(&mut Builder)) -> String {
    let mut b = Builder::new();
    f(&mut b);
    let params = params
        .iter()
        .map(|(n, ty)| Param {
            name: n.to_string(),
            ty: *ty,
        })
        .collect();
    let entry = b.finish(name, params, LaunchBounds::default());
    let mut s = String::new();
    print::write_entry(&mut s, &entry).unwrap();
    s
}

fn param(b: &mut Builder, name: &str, ty: Ty) -> AnyReg {
    b.ld_param(&Param {
        name: name.into(),
        ty,
    })
}

fn u64_param(b: &mut Builder, name: &str) -> Reg<B64> {
    match param(b, name, Ty::U64) {
        AnyReg::B64(r) => r,
        r => unreachable!("{r:?}"),
    }
}

#[test]
fn snippet_index_arithmetic() {
    let ptx = snippet("index", &[("q", Ty::U64)], |b| {
        b.comment("lane, warp and a 64-bit row address q + (row * 256 + lane * 16)");
        let q = u64_param(b, "q");
        let q = b.cvta_global(q);
        let tid = b.special(Special::TidX);
        let lane = b.and_b32(tid, 31u32);
        let warp = b.shr_u32(tid, 5u32);
        let row = b.mad_lo_u32(warp, 16u32, lane);
        let off = b.mul_wide_u32(row, 256u32);
        let off = b.mad_wide_u32(lane, 16u32, off);
        let batch = b.special(Special::CtaIdZ);
        let batch = b.cvt_u64_u32(batch);
        let boff = b.mul_lo_u64(batch, 1i64 << 20);
        let off = b.add_s64(off, boff);
        b.add_s64(q, off);
    });
    assert_snapshot!(ptx);
}

#[test]
fn snippet_online_softmax_math() {
    let ptx = snippet("softmax", &[("scale_log2", Ty::F32)], |b| {
        b.comment("p = 2^(s * scale_log2 - max_scaled), with max_scaled = 0 while m = -inf");
        let AnyReg::F32(scale) = param(b, "scale_log2", Ty::F32) else {
            unreachable!()
        };
        let s = b.mov(0.5f32);
        let m = b.mov(f32::NEG_INFINITY);
        let m = b.max_f32(m, s);
        let inf = b.setp_f32(Cmp::Eq, m, f32::NEG_INFINITY);
        let ms = b.mul_f32(m, scale);
        let ms = b.selp_f32(0.0f32, ms, inf);
        let nms = b.neg_f32(ms);
        let x = b.fma_f32(s, scale, nms);
        let p = b.ex2(x);
        let sum = b.shfl_bfly_f32(p, 1);
        let sum = b.add_f32(p, sum);
        let inv = b.rcp(sum);
        let lg = b.lg2(sum);
        let _ = b.sub_f32(lg, inv);
        let k = b.special(Special::CtaIdX);
        let _ = b.cvt_f32_s32(k);
    });
    assert_snapshot!(ptx);
}

#[test]
fn snippet_predicates_and_control_flow() {
    let ptx = snippet("control", &[("n", Ty::U32)], |b| {
        b.comment("for (i = 0; i < n; i++) with a guarded barrier and a uniform back edge");
        let AnyReg::B32(n) = param(b, "n", Ty::U32) else {
            unreachable!()
        };
        let tid = b.special(Special::TidX);
        let i = b.mov(0u32);
        let top = b.label();
        let done = b.label();
        let empty = b.setp_u32(Cmp::Ge, i, n);
        b.bra_if(empty, false, done, true);
        b.place(top);
        let first = b.setp_u32(Cmp::Eq, tid, 0u32);
        let even = b.and_b32(i, 1u32);
        let even = b.setp_u32(Cmp::Eq, even, 0u32);
        let both = b.and_pred(first, even);
        let _either = b.or_pred(first, even);
        b.when(both, false, |b| b.bar_sync());
        let step = b.selp_b32(1u32, 2u32, even);
        let next = b.add_u32(i, step);
        b.assign(i, next);
        let more = b.setp_s32(Cmp::Lt, i, n);
        b.bra_if(more, false, top, true);
        b.place(done);
    });
    assert_snapshot!(ptx);
}

#[test]
fn snippet_memory() {
    let ptx = snippet("memory", &[("src", Ty::U64), ("dst", Ty::U64)], |b| {
        b.comment(
            "16-byte global load (read-only path), shared round trip, f32 stores, atomic add",
        );
        let src = u64_param(b, "src");
        let src = b.cvta_global(src);
        let dst = u64_param(b, "dst");
        let dst = b.cvta_global(dst);
        let smem = b.smem_base();
        let v: [Reg<B32>; 4] = b.ld(
            Space::Global,
            LdCache::NonCoherent,
            Ty::B32,
            Addr::Global(src, 0),
        );
        b.st(Space::Shared, Ty::B32, Addr::Shared(smem, 0), &v);
        let w: [Reg<F32>; 2] = b.ld(
            Space::Shared,
            LdCache::Default,
            Ty::F32,
            Addr::Shared(smem, 8),
        );
        b.st(Space::Global, Ty::F32, Addr::Global(dst, 0), &w);
        b.st(Space::Global, Ty::F32, Addr::Global(dst, 8), &w[..1]);
        b.red_add_f32(Addr::Global(dst, 16), w[1]);
    });
    assert_snapshot!(ptx);
}

#[test]
fn snippet_async_copy() {
    let ptx = snippet("async_copy", &[("k", Ty::U64), ("seqlen", Ty::U32)], |b| {
        b.comment("cp.async one 16-byte chunk per lane; rows past seqlen are zero-filled");
        let k = u64_param(b, "k");
        let k = b.cvta_global(k);
        let AnyReg::B32(seqlen) = param(b, "seqlen", Ty::U32) else {
            unreachable!()
        };
        let lane = b.special(Special::LaneId);
        let smem = b.smem_base();
        let row = b.shr_u32(lane, 1u32);
        let ok = b.setp_u32(Cmp::Lt, row, seqlen);
        let size = b.selp_b32(16u32, 0u32, ok);
        let off = b.mul_wide_u32(lane, 16u32);
        let off = b.selp_b64(off, 0i64, ok);
        let g = b.add_s64(k, off);
        let s = b.mad_lo_u32(lane, 16u32, smem);
        b.cp_async(
            CpSize::B16,
            Addr::Shared(s, 0),
            Addr::Global(g, 0),
            Some(size.into()),
        );
        b.cp_async(CpSize::B4, Addr::Shared(s, 512), Addr::Global(g, 0), None);
        b.cp_async_commit();
        b.cp_async_wait(0);
        b.bar_sync();
    });
    assert_snapshot!(ptx);
}

#[test]
fn snippet_tensor_core() {
    let ptx = snippet("tensor_core", &[], |b| {
        b.comment("A and B fragments by ldmatrix, acc += A * B, then acc packed to bf16x2");
        let smem = b.smem_base();
        let a = b.ldmatrix::<4>(false, Addr::Shared(smem, 0));
        let kt = b.ldmatrix::<2>(false, Addr::Shared(smem, 512));
        let v = b.ldmatrix::<4>(true, Addr::Shared(smem, 1024));
        let _one = b.ldmatrix::<1>(true, Addr::Shared(smem, 2048));
        let acc: [Reg<F32>; 4] = std::array::from_fn(|_| b.mov(0.0f32));
        b.mma(HalfFmt::Bf16, acc, a, kt);
        b.mma(HalfFmt::F16, acc, a, [v[0], v[1]]);
        b.pack(HalfFmt::Bf16, acc[0], acc[1]);
        b.pack(HalfFmt::F16, acc[2], acc[3]);
    });
    assert_snapshot!(ptx);
}

#[test]
fn probe_bf16_full_ptx() {
    let ptx = stable(&print::module(&probe::module(DType::Bf16)));
    assert_snapshot!(ptx);
}

#[test]
fn fwd_d64_f16_full_ptx() {
    let spec: KernelSpec = "fa2_fwd_d64_f16_sm80".parse().unwrap();
    let ptx = stable(&flash_codegen::generate(&spec));
    assert_snapshot!(ptx);
}

#[test]
fn fwd_d128_bf16_causal_full_ptx() {
    let spec: KernelSpec = "fa2_fwd_d128_bf16_causal_sm80".parse().unwrap();
    let ptx = stable(&flash_codegen::generate(&spec));
    assert_snapshot!(ptx);
}

/// One block of the summary: smem, declared registers, instruction counts by opcode.
fn summarize(out: &mut String, name: &str, smem: u32, ptx: &str) {
    let regs = common::declared_regs(ptx);
    let lines = common::instruction_lines(ptx);
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &lines {
        *ops.entry(common::opcode(l)).or_default() += 1;
    }
    let reg = |p: &str| regs.get(p).copied().unwrap_or(0);
    writeln!(out, "{name}:").unwrap();
    writeln!(out, "  dynamic_smem_bytes: {smem}").unwrap();
    writeln!(
        out,
        "  regs: {{pred: {}, b32: {}, f32: {}, b64: {}}}",
        reg("%p"),
        reg("%r"),
        reg("%f"),
        reg("%rd")
    )
    .unwrap();
    writeln!(out, "  instructions: {}", lines.len()).unwrap();
    writeln!(out, "  ops:").unwrap();
    for (op, n) in ops {
        writeln!(out, "    {op}: {n}").unwrap();
    }
}

/// Every kernel in one snapshot, so that no change to any variant goes unseen.
#[test]
fn every_kernel_summary() {
    let mut out = String::new();
    for spec in KernelSpec::all() {
        let smem = abi::launch(&spec.plan(&Tuning::NONE)).dynamic_smem_bytes;
        summarize(
            &mut out,
            &spec.name(),
            smem,
            &flash_codegen::generate(&spec),
        );
    }
    for d in DType::ALL {
        let ptx = print::module(&probe::module(d));
        summarize(&mut out, &probe::entry_name(d), probe::SMEM_BYTES, &ptx);
    }
    let summary = out;
    assert_snapshot!(summary);
}

/// Snippets print through the same module printer as kernels (header sanity).
#[test]
fn module_header_for_sm80() {
    let m = Module {
        target: Target::Sm80,
        entries: vec![],
    };
    let ptx = stable(&print::module(&m));
    assert_snapshot!(ptx);
}

/// The layout of `manifest.json` (its fields, their order and values): a causal forward,
/// the long-sequence backward (`min_seqlen_q` set) and an elementwise pass (`block_n` 0),
/// and two sm_90a forwards (d64 bf16 causal, plain and ALiBi: their parameters with
/// offsets and their three tensor maps), with the generator version redacted.
#[test]
fn manifest_layout() {
    use flash_codegen::manifest::{manifest_with_sm90a, sm90a};
    let specs = [
        "fa2_fwd_d128_bf16_causal_sm80",
        "fa2_bwd_d128_bf16_long_sm80",
        "fa2_bwdpre_d64_f16_sm80",
    ]
    .map(|name| name.parse::<KernelSpec>().unwrap());
    let sm90 = sm90a::shipping()
        .into_iter()
        .filter(|v| v.dtype == DType::Bf16 && v.head_dim == 64 && v.causal)
        .filter(|v| v.scores != flash_codegen::Scores::Softcap)
        .collect::<Vec<_>>();
    assert_eq!(sm90.len(), 2);
    let mut m = manifest_with_sm90a(&specs, &sm90, &Tuning::NONE);
    m.generator.version = "[VERSION]".to_string();
    let manifest_json = m.to_json();
    assert_snapshot!(manifest_json);
}
