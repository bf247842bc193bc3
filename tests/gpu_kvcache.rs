//! GPU (feature `gpu`): the KV-cache forward (`forward_kvcache_into`, split pass then
//! combine) against the f64 CPU reference (`reference::attention_kvcache_f64`), in four
//! groups, one `#[test]` each:
//!
//! - `matrix`: every kernel head dim and two that are not (40, 200) x f16/bf16 x causal
//!   and not x three shapes: decode (1 query) GQA 32/8, speculative (4 queries) MQA 8/1,
//!   16 queries MHA with a sequence shorter than the queries;
//! - `prefill`: chunked prefill, 129 queries against caches of 1500..4096;
//! - `seqlens`: seqlens_k of 0, 1, 77 (a multiple of no tile), the capacity, -5,
//!   i32::MAX, i32::MIN (these clamp to [0, capacity]), `None`, and a capacity of 0;
//! - `splits`: forced split counts 1, 2, 7, 128 and the automatic choice, split counts
//!   above the cache's key blocks (lowered) and above a short sequence's (empty splits).
//!
//! Every case: fresh random inputs (rounded to the dtype); q padded (NaN in the gaps) or
//! contiguous; the caches contiguous or strided views of larger buffers (rows past the
//! capacity, extra heads, a padded head stride, the view starting at row 2 / head 1),
//! every cache row at or past its sequence's length NaN (a cache holds garbage there);
//! o NaN inside a buffer whose other elements (the gaps of a padded view, a tail) hold a
//! sentinel; lse NaN between two sentinel bands, its view running past b*h*sq and
//! starting 4-byte (not 16-byte) aligned. Checked: no NaN left in o, every sentinel
//! intact, fully masked rows exactly 0 with lse -inf, o within gpu_fwd's rel-L2
//! tolerances, lse within 1e-3; a second identical call gives the same bits (o, lse and
//! both guard bands); the allocating `forward_kvcache` gives the same bits as `_into`.
//! `GPU_KV_D=64,128` limits the matrix's head dims.
#![cfg(feature = "gpu")]

use std::error::Error;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUdevice_attribute;
use flash_codegen::{Arch, DType};
use flash_runtime::reference::{Shape, attention_kvcache_f64, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::tensor::contiguous_strides;
use flash_runtime::validate::{GpuFill, KvArgs, TensorDesc, plan_kvcache};
use flash_runtime::{Element, FlashAttention, KvOptions};

mod gpu_support;
use gpu_support::{Placed, attn_params, rounded, upload};

/// What fills o's buffer outside the view (exact in f16 and bf16).
const O_SENTINEL: f32 = 12288.0;
/// What fills the bands around lse.
const LSE_SENTINEL: f32 = 12345.0;
/// f32 sentinels before lse (148 bytes: the view is 4-byte aligned, not 16) and after
/// b*h*sq (inside the view given to the call).
const LSE_GUARD: usize = 37;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// q, o and the caches row-major with no gaps; the caches' buffers hold exactly
    /// `capacity` rows.
    Contiguous,
    /// q and o padded (`Placed::new(.., true)`), the caches views of larger buffers.
    Strided,
}

#[derive(Clone, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    b: usize,
    sq: usize,
    /// The caches' capacity (their seqlen).
    cap: usize,
    h: usize,
    hk: usize,
    /// seqlens_k, or `None` (every sequence fills its cache).
    lens: Option<Vec<i32>>,
    /// `KvOptions::with_splits`, or `None` (the runtime chooses).
    splits: Option<u32>,
    layout: Layout,
    lse: bool,
}

impl Case {
    fn base(d: usize, dtype: DType, causal: bool) -> Self {
        Case {
            d,
            dtype,
            causal,
            b: 1,
            sq: 1,
            cap: 64,
            h: 1,
            hk: 1,
            lens: None,
            splits: None,
            layout: Layout::Contiguous,
            lse: true,
        }
    }

    /// Each sequence's valid keys as the kernels see them (clamped to `[0, cap]`).
    fn clamped_lens(&self) -> Vec<usize> {
        match &self.lens {
            Some(l) => l
                .iter()
                .map(|&x| (x.max(0) as usize).min(self.cap))
                .collect(),
            None => vec![self.cap; self.b],
        }
    }

    fn opts(&self) -> KvOptions {
        match self.splits {
            Some(n) => KvOptions::with_splits(n),
            None => KvOptions::new(),
        }
    }

    fn desc(&self, planned: Option<u32>) -> String {
        let lens = match &self.lens {
            Some(l) => format!("{l:?}").replace(' ', ""),
            None => "none".into(),
        };
        let splits = match self.splits {
            Some(n) => n.to_string(),
            None => "auto".into(),
        };
        let planned = planned.map_or("?".into(), |n| n.to_string());
        format!(
            "d={:3} {:4} {:6} b={} sq={:3} cap={:5} h={:2}/{:<2} lens={lens} splits={splits}->{planned} \
             {:10} lse={}",
            self.d,
            self.dtype.name(),
            if self.causal { "causal" } else { "full" },
            self.b,
            self.sq,
            self.cap,
            self.h,
            self.hk,
            format!("{:?}", self.layout),
            if self.lse { "y" } else { "n" },
        )
    }
}

/// The split count the runtime's planner picks for `c` on this GPU: `plan_kvcache` (what
/// `forward_kvcache_into` calls) on contiguous descriptions of the same shapes at made-up
/// addresses (the count depends on the shapes, the mask, the request and the GPU only).
fn planned_splits(rt: &FlashAttention, c: &Case) -> Result<u32, Box<dyn Error>> {
    let sms = rt
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let desc = |shape: [usize; 4], ptr: u64| TensorDesc {
        shape,
        strides: contiguous_strides(shape),
        ptr,
        len: shape.iter().product::<usize>().max(1),
        dtype: c.dtype,
    };
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.cap, c.hk, c.d]);
    let args = KvArgs {
        q: desc(qs, 1 << 40),
        k: desc(ks, 2 << 40),
        v: desc(ks, 3 << 40),
        o: desc(qs, 4 << 40),
        lse: None,
        seqlens_k: None,
        params: attn_params(c.causal, None),
        num_splits: c.opts().num_splits,
    };
    let gpu = GpuFill {
        sms: sms.max(1) as u32,
        smem_optin: rt.smem_limit(),
    };
    // FlashAttention runs the sm_80 kernels on every GPU (FlashAttention::new)
    Ok(plan_kvcache(&args, Arch::Sm80, gpu)?.num_splits)
}

/// Where a `[b, cap, hk, d]` cache sits in its buffer, and the buffer's length.
fn cache_place(c: &Case) -> (Placed, usize) {
    let (b, cap, hk, d) = (c.b, c.cap, c.hk, c.d);
    let shape = [b, cap, hk, d];
    match c.layout {
        Layout::Contiguous => (Placed::new(shape, false), (b * cap * hk * d).max(8)),
        Layout::Strided => {
            // room for 7 more rows and 3 more heads, head stride d + 8; the view starts
            // at row 2, head 1 (a cache of more layers or sequences than this call's)
            let (rows, heads, ds) = (cap + 7, hk + 3, d + 8);
            let p = Placed {
                shape,
                strides: [rows * heads * ds, heads * ds, ds, 1],
                offset: (2 * heads + 1) * ds,
            };
            (p, b * rows * heads * ds)
        }
    }
}

/// The bits of a buffer's elements, to compare two runs.
fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.to_f32().to_bits()).collect()
}

fn fbits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Index into lse `[b, h, sq]` of logical o element `i` (o's shape `[b, sq, h, d]`).
fn lse_index([_, sq, h, d]: [usize; 4], i: usize) -> usize {
    let row = i / d;
    let (bi, si, hi) = (row / (sq * h), (row / h) % sq, row % h);
    (bi * h + hi) * sq + si
}

struct Outcome {
    o_err: f64,
    lse_err: f64,
    problems: Vec<String>,
}

/// One `forward_kvcache_into` call's outputs, downloaded: o's whole buffer and lse's
/// (guards included).
struct Run<T> {
    o: Vec<T>,
    lse: Vec<f32>,
}

fn run_case<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    c: &Case,
    seed: u64,
) -> Result<Outcome, Box<dyn Error>> {
    let mut rng = Rng::new(seed);
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.cap, c.hk, c.d]);
    let (q, qf) = rounded::<T>(&mut rng, qs.iter().product());
    let (k, kf) = rounded::<T>(&mut rng, ks.iter().product());
    let (v, vf) = rounded::<T>(&mut rng, ks.iter().product());
    if let Some(l) = &c.lens {
        assert_eq!(l.len(), c.b, "case bug: lens must hold b values");
    }
    let lens = c.clamped_lens();

    // inputs: q padded or not (NaN gaps); the caches with NaN everywhere but the valid
    // rows of each sequence
    let strided = c.layout == Layout::Strided;
    let pq = Placed::new(qs, strided);
    let q_d = upload(stream, &pq, &q)?;
    let (pk, kv_len) = cache_place(c);
    let row = c.hk * c.d;
    let cache = |vals: &[T]| {
        let mut host = vec![T::from_f32(f32::NAN); kv_len];
        for (i, (&p, &x)) in pk.positions().iter().zip(vals).enumerate() {
            let (bi, j) = (i / (c.cap * row), (i / row) % c.cap);
            if j < lens[bi] {
                host[p] = x;
            }
        }
        stream.clone_htod(&host)
    };
    let (k_d, v_d) = (cache(&k)?, cache(&v)?);
    let seqlens_d = match &c.lens {
        Some(l) => Some(stream.clone_htod(l)?),
        None => None,
    };
    let seqlens_v = seqlens_d.as_ref().map(|s| s.as_view());
    let params = attn_params(c.causal, None);
    let opts = c.opts();

    // outputs: o NaN in the view, the sentinel elsewhere; lse NaN between sentinel bands
    let po = Placed::new(qs, strided);
    let (o_pos, o_len) = (po.positions(), po.buffer_len());
    let lse_n = c.b * c.h * c.sq;
    let mut o_host0 = vec![T::from_f32(O_SENTINEL); o_len];
    o_pos
        .iter()
        .for_each(|&p| o_host0[p] = T::from_f32(f32::NAN));
    let mut lse_host0 = vec![LSE_SENTINEL; LSE_GUARD + lse_n + LSE_GUARD];
    lse_host0[LSE_GUARD..LSE_GUARD + lse_n].fill(f32::NAN);

    let into = || -> Result<Run<T>, Box<dyn Error>> {
        let mut o_buf = stream.clone_htod(&o_host0)?;
        let mut lse_buf = stream.clone_htod(&lse_host0)?;
        {
            let mut o_t = po.view_mut(&mut o_buf);
            let lse_arg = c.lse.then(|| lse_buf.slice_mut(LSE_GUARD..));
            rt.forward_kvcache_into(
                stream,
                &pq.view(&q_d),
                &pk.view(&k_d),
                &pk.view(&v_d),
                seqlens_v.as_ref(),
                &mut o_t,
                lse_arg,
                &params,
                &opts,
            )?;
        }
        Ok(Run {
            o: stream.clone_dtoh(&o_buf)?,
            lse: stream.clone_dtoh(&lse_buf)?,
        })
    };
    let first = into()?;
    let second = into()?;
    let alloc = rt.forward_kvcache(
        stream,
        &pq.view(&q_d),
        &pk.view(&k_d),
        &pk.view(&v_d),
        seqlens_v.as_ref(),
        &params,
        &opts,
    )?;
    let alloc_o: Vec<T> = stream.clone_dtoh(&alloc.o)?;
    let alloc_lse: Vec<f32> = stream.clone_dtoh(&alloc.lse)?;

    let shape = Shape::new(c.b, c.sq, c.cap, c.h, c.hk, c.d);
    let ref_lens: Vec<i32> = match &c.lens {
        Some(l) => l.clone(),
        None => vec![i32::try_from(c.cap)?; c.b],
    };
    let r = attention_kvcache_f64(&shape, &qf, &kf, &vf, &ref_lens, c.causal, None)?;

    let mut problems = Vec::new();
    let (o_host, lse_host) = (&first.o, &first.lse);
    let mut in_view = vec![false; o_len];
    o_pos.iter().for_each(|&p| in_view[p] = true);
    let sentinel = O_SENTINEL.to_bits();
    let overwritten = (0..o_len)
        .filter(|&p| !in_view[p] && o_host[p].to_f32().to_bits() != sentinel)
        .count();
    if overwritten > 0 {
        problems.push(format!(
            "{overwritten} o guard elements (outside the view) overwritten"
        ));
    }
    let o: Vec<f64> = o_pos.iter().map(|&p| o_host[p].to_f32() as f64).collect();
    let nan = o.iter().filter(|x| x.is_nan()).count();
    if nan > 0 {
        problems.push(format!(
            "{nan} of {} o elements NaN (unwritten, or read from the NaN past a sequence's \
             length / outside the views)",
            o.len()
        ));
    }
    let masked_nonzero = (0..o.len())
        .filter(|&i| r.lse[lse_index(qs, i)] == f64::NEG_INFINITY && o[i] != 0.0)
        .count();
    if masked_nonzero > 0 {
        problems.push(format!(
            "{masked_nonzero} o elements of fully masked rows not 0"
        ));
    }
    let o_err = rel_l2(&o, &r.o);
    let tol = if c.dtype == DType::Bf16 { 3e-3 } else { 4e-4 };
    let o_ok = o_err <= tol; // false for NaN
    if !o_ok {
        problems.push(format!("o rel-L2 {o_err:.3e} > {tol:.0e}"));
    }

    let (front, tail) = (&lse_host[..LSE_GUARD], &lse_host[LSE_GUARD + lse_n..]);
    if front
        .iter()
        .chain(tail)
        .any(|&x| x.to_bits() != LSE_SENTINEL.to_bits())
    {
        problems.push("lse guard band overwritten (before the view or past b*h*sq)".into());
    }
    let lse = &lse_host[LSE_GUARD..LSE_GUARD + lse_n];
    let mut lse_err = 0.0f64;
    if c.lse {
        let mut reported = 0;
        for (i, (&got, &want)) in lse.iter().zip(&r.lse).enumerate() {
            let e = if want == f64::NEG_INFINITY {
                if got == f32::NEG_INFINITY {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                (got as f64 - want).abs()
            };
            let e_ok = e <= 1e-3; // false for NaN
            if !e_ok && reported < 3 {
                problems.push(format!("lse[{i}] = {got}, want {want}"));
                reported += 1;
            }
            lse_err = if e.is_nan() {
                f64::INFINITY
            } else {
                lse_err.max(e)
            };
        }
    } else if lse.iter().any(|x| !x.is_nan()) {
        problems.push("lse written though the call got None".into());
    }

    // the same call twice: the same bits everywhere (guards included)
    if bits(&first.o) != bits(&second.o) {
        let n = bits(&first.o)
            .iter()
            .zip(bits(&second.o))
            .filter(|(a, b)| **a != *b)
            .count();
        problems.push(format!(
            "not deterministic: {n} o elements differ between two runs"
        ));
    }
    if fbits(&first.lse) != fbits(&second.lse) {
        problems.push("not deterministic: lse differs between two runs".into());
    }
    // the allocating call: o contiguous, the same bits as `_into`'s view
    let o_into: Vec<u32> = o_pos
        .iter()
        .map(|&p| o_host[p].to_f32().to_bits())
        .collect();
    if alloc.shape != qs || alloc_o.len() < o_into.len() || alloc_lse.len() < lse_n {
        problems.push(format!(
            "forward_kvcache returned shape {:?}, o {} and lse {} elements; want {qs:?}, {} \
             and {lse_n}",
            alloc.shape,
            alloc_o.len(),
            alloc_lse.len(),
            o_into.len()
        ));
    } else {
        let n = bits(&alloc_o[..o_into.len()])
            .iter()
            .zip(&o_into)
            .filter(|(a, b)| *a != *b)
            .count();
        if n > 0 {
            problems.push(format!(
                "forward_kvcache (allocating) differs from forward_kvcache_into in {n} o \
                 elements"
            ));
        }
        if c.lse && fbits(&alloc_lse[..lse_n]) != fbits(lse) {
            problems.push("forward_kvcache (allocating) lse differs from _into's".into());
        }
    }
    Ok(Outcome {
        o_err,
        lse_err,
        problems,
    })
}

/// Runs `cases`, one line each, then a summary line; panics listing the failures.
fn run_group(group: &str, cases: &[Case]) {
    let rt = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"));
    let stream = rt.context().default_stream();
    let start = Instant::now();
    let (mut failures, mut worst) = (Vec::new(), [0.0f64; 2]);
    for (i, c) in cases.iter().enumerate() {
        let seed = 0x6b76_c4c3 ^ ((group.len() as u64) << 40) ^ ((i as u64) << 20);
        let planned = planned_splits(&rt, c);
        let desc = format!("{group} {}", c.desc(planned.as_ref().ok().copied()));
        let res = planned.and_then(|_| match c.dtype {
            DType::F16 => run_case::<half::f16>(&rt, &stream, c, seed),
            DType::Bf16 => run_case::<half::bf16>(&rt, &stream, c, seed),
        });
        match res {
            Ok(out) => {
                let w = &mut worst[(c.dtype == DType::Bf16) as usize];
                *w = if out.o_err.is_nan() {
                    f64::INFINITY
                } else {
                    w.max(out.o_err)
                };
                let status = if out.problems.is_empty() {
                    "ok".to_string()
                } else {
                    out.problems.join("; ")
                };
                println!(
                    "{desc}  o_rel_l2={:.2e} lse_abs={:.2e}  {status}",
                    out.o_err, out.lse_err
                );
                if !out.problems.is_empty() {
                    failures.push(format!("{desc}: {status}"));
                }
            }
            Err(e) => {
                println!("{desc}  ERROR {e}");
                failures.push(format!("{desc}: error {e}"));
            }
        }
    }
    println!(
        "\n{group}: {} cases in {:.1}s, {} failed; worst o rel-L2: f16 {:.2e}, bf16 {:.2e}",
        cases.len(),
        start.elapsed().as_secs_f64(),
        failures.len(),
        worst[0],
        worst[1]
    );
    assert!(
        failures.is_empty(),
        "{group}: {} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

const DTYPES: [DType; 2] = [DType::F16, DType::Bf16];

/// Head dims x dtypes x masks x three shapes.
fn matrix_cases() -> Vec<Case> {
    let dims: Vec<usize> = match std::env::var("GPU_KV_D") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![32, 64, 96, 128, 160, 192, 224, 256, 40, 200],
    };
    let mut v = Vec::new();
    for &d in &dims {
        for dtype in DTYPES {
            for causal in [false, true] {
                let base = Case::base(d, dtype, causal);
                let n = v.len();
                v.extend([
                    // decode, GQA 32/8: empty, one key, odd, full; the caches views of
                    // larger buffers; the runtime's split count
                    Case {
                        b: 4,
                        sq: 1,
                        cap: 1000,
                        h: 32,
                        hk: 8,
                        lens: Some(vec![0, 1, 517, 1000]),
                        layout: Layout::Strided,
                        ..base.clone()
                    },
                    // speculative verification, MQA 8/1, 5 splits
                    Case {
                        b: 2,
                        sq: 4,
                        cap: 777,
                        h: 8,
                        hk: 1,
                        lens: Some(vec![777, 5]),
                        splits: Some(5),
                        ..base.clone()
                    },
                    // 16 queries, MHA, a sequence of 7 (< 16: causal rows see nothing),
                    // one split (no combine)
                    Case {
                        b: 2,
                        sq: 16,
                        cap: 333,
                        h: 4,
                        hk: 4,
                        lens: Some(vec![333, 7]),
                        splits: Some(1),
                        layout: Layout::Strided,
                        ..base
                    },
                ]);
                // no lse on a rotating third of the cases
                let k = (n / 3) % 3;
                v[n + k].lse = false;
            }
        }
    }
    v
}

#[test]
fn kvcache_matrix_matches_f64_reference() {
    run_group("matrix", &matrix_cases());
}

/// Chunked prefill: 129 queries (three packed row blocks and more), GQA / MHA / MQA.
#[test]
fn kvcache_chunked_prefill_matches_f64_reference() {
    let mut v = Vec::new();
    for d in [64, 128, 256] {
        for causal in [false, true] {
            let dt = |i: usize| DTYPES[(i + d / 64 + causal as usize) % 2];
            v.extend([
                Case {
                    b: 3,
                    sq: 129,
                    cap: 2048,
                    h: 8,
                    hk: 2,
                    // 100 < 129: causal rows before the sequence start see nothing
                    lens: Some(vec![2048, 200, 100]),
                    layout: Layout::Strided,
                    ..Case::base(d, dt(0), causal)
                },
                Case {
                    b: 1,
                    sq: 129,
                    cap: 4096,
                    h: 8,
                    hk: 8,
                    splits: Some(1),
                    ..Case::base(d, dt(1), causal)
                },
                Case {
                    b: 2,
                    sq: 129,
                    cap: 1500,
                    h: 8,
                    hk: 1,
                    lens: Some(vec![1500, 129]),
                    splits: Some(3),
                    layout: Layout::Strided,
                    lse: d != 128,
                    ..Case::base(d, dt(2), causal)
                },
            ]);
        }
    }
    run_group("prefill", &v);
}

/// seqlens_k values at and past the edges (clamped to [0, capacity]), `None`, and a
/// capacity of 0.
#[test]
fn kvcache_seqlens_edges_match_f64_reference() {
    let lens = vec![0, 1, 77, 300, -5, i32::MAX, i32::MIN, 299];
    let mut v = Vec::new();
    for (d, dtype) in [(128, DType::Bf16), (64, DType::F16), (40, DType::Bf16)] {
        for causal in [false, true] {
            let base = Case {
                b: 8,
                cap: 300,
                h: 16,
                hk: 2,
                lens: Some(lens.clone()),
                ..Case::base(d, dtype, causal)
            };
            v.extend([
                Case {
                    sq: 1,
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    sq: 4,
                    splits: Some(3),
                    ..base.clone()
                },
                Case {
                    sq: 16,
                    splits: Some(1),
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 4,
                    lens: None,
                    layout: Layout::Strided,
                    ..base.clone()
                },
                // capacity 0: every row o = 0, lse = -inf (5 clamps to 0)
                Case {
                    b: 2,
                    sq: 3,
                    cap: 0,
                    h: 4,
                    hk: 2,
                    lens: Some(vec![0, 5]),
                    layout: Layout::Strided,
                    ..base.clone()
                },
                Case {
                    b: 2,
                    sq: 3,
                    cap: 0,
                    h: 4,
                    hk: 2,
                    lens: None,
                    splits: Some(4),
                    ..base
                },
            ]);
        }
    }
    run_group("seqlens", &v);
}

/// Forced split counts and the automatic one; counts above the key blocks.
#[test]
fn kvcache_split_counts_match_f64_reference() {
    let mut v = Vec::new();
    for dtype in DTYPES {
        for causal in [false, true] {
            // d128 (block_n 64): 47 key blocks, so 128 is lowered to 47
            for splits in [Some(1), Some(2), Some(7), Some(128), None] {
                v.push(Case {
                    b: 2,
                    sq: 4,
                    cap: 3000,
                    h: 8,
                    hk: 2,
                    lens: Some(vec![3000, 1234]),
                    splits,
                    layout: Layout::Strided,
                    ..Case::base(128, dtype, causal)
                });
            }
            // 128 splits kept (d256, block_n 32: 129 key blocks, 2 per split, the last
            // 63 splits of the first sequence empty and 96 of the second)
            v.push(Case {
                b: 2,
                sq: 1,
                cap: 4100,
                h: 4,
                hk: 1,
                lens: Some(vec![4100, 1000]),
                splits: Some(128),
                layout: Layout::Strided,
                ..Case::base(256, dtype, causal)
            });
            // one decode token, MQA 8/1 on a long cache: the automatic rule picks many
            // splits (one CTA per split otherwise)
            v.push(Case {
                b: 1,
                sq: 1,
                cap: 32768,
                h: 8,
                hk: 1,
                ..Case::base(64, dtype, causal)
            });
            v.extend([
                // 40 splits of 2 key blocks (d256, cap 64): lowered to 2
                Case {
                    b: 2,
                    sq: 7,
                    cap: 64,
                    h: 4,
                    hk: 2,
                    lens: Some(vec![64, 63]),
                    splits: Some(40),
                    ..Case::base(256, dtype, causal)
                },
                // 7 splits of 1 key block (d32, block_n 128): lowered to 1
                Case {
                    b: 2,
                    sq: 2,
                    cap: 100,
                    h: 4,
                    hk: 4,
                    lens: Some(vec![100, 50]),
                    splits: Some(7),
                    layout: Layout::Strided,
                    ..Case::base(32, dtype, causal)
                },
                // 17 packed rows (MHA, 17 queries): one more than the fewest-rows tiles
                // hold; 3 splits
                Case {
                    b: 2,
                    sq: 17,
                    cap: 500,
                    h: 2,
                    hk: 2,
                    lens: Some(vec![500, 10]),
                    splits: Some(3),
                    ..Case::base(96, dtype, causal)
                },
                // 16 splits of a 16-block cache whose sequences hold 3 and 1 keys: all but
                // the first split of each sequence empty (lse -inf partials)
                Case {
                    b: 2,
                    sq: 1,
                    cap: 2000,
                    h: 8,
                    hk: 2,
                    lens: Some(vec![3, 1]),
                    splits: Some(16),
                    layout: Layout::Strided,
                    ..Case::base(64, dtype, causal)
                },
            ]);
        }
    }
    run_group("splits", &v);
}
