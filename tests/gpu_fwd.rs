//! GPU (feature `gpu`): the forward kernels against the f64 CPU reference over a matrix of
//! head dims x dtypes x causal x shapes (odd seqlens, sq != sk both ways, GQA, MQA,
//! batch > 1, seqlen_k = 0) x layouts (contiguous, padded strides, packed qkv).
//! Fresh random inputs per case; every output buffer is poisoned with NaN first, then each
//! element of the view must be written (no NaN) and every padding element left untouched.
//! `GPU_FWD_D=64,128` limits the head dims. The cases the d256 kernel serves run a second
//! time under a 99 KiB shared-memory limit, on its compact tiling (RTX 30/40).
//! Those run the preallocated `forward_into`; the allocating `forward` is checked against
//! the reference on a few cases, and `[b, h, s, d]` (PyTorch) tensors through
//! `Tensor4::from_bhsd` / `Tensor4Mut::from_bhsd` against the same `[b, s, h, d]` ones.
#![cfg(feature = "gpu")]

use cudarc::driver::{CudaSlice, CudaStream};
use flash_codegen::{DType, KernelSpec, Tiling};
use flash_runtime::reference::{Shape, attention_forward, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::tensor::contiguous_strides;
use flash_runtime::{Element, FlashAttention, Tensor4, Tensor4Mut};
use std::sync::Arc;

mod gpu_support;
use gpu_support::{
    Outcome, Placed, attn_params, bhsd_to_bshd, bshd_to_bhsd, check_o, for_each_problem,
    lse_abs_err, lse_index, o_tol, report_case, rounded, upload,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Row-major, no gaps.
    Contiguous,
    /// Gaps after each head, row and batch, and a 16-byte offset: strides are free.
    Padded,
    /// q, k, v sliced out of one `[b, s, 3, h, d]` buffer (o contiguous).
    Packed,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    layout: Layout,
    lse: bool,
    seed: u64,
}

/// (batch, seqlen_q, seqlen_k, heads, heads_k, layout)
const SHAPES: [(usize, usize, usize, usize, usize, Layout); 12] = [
    (2, 1, 1, 2, 2, Layout::Contiguous),
    (1, 17, 17, 4, 2, Layout::Padded),
    (2, 128, 128, 8, 2, Layout::Contiguous), // GQA 8/2
    (1, 1000, 1000, 4, 1, Layout::Padded),   // MQA
    (1, 2061, 2061, 2, 2, Layout::Contiguous),
    (3, 17, 128, 2, 2, Layout::Contiguous), // sq < sk
    (2, 128, 17, 2, 1, Layout::Padded),     // sq > sk: causal rows fully masked
    (1, 1, 1000, 4, 1, Layout::Contiguous), // decode
    (1, 1000, 2061, 2, 1, Layout::Contiguous),
    (1, 2061, 1000, 1, 1, Layout::Padded),
    (2, 300, 300, 4, 4, Layout::Packed),
    (1, 5, 0, 2, 2, Layout::Contiguous), // no keys: o = 0, lse = -inf
];

fn run_case<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    c: &Case,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut rng = Rng::new(c.seed);
    let qs = [c.b, c.sq, c.h, c.d];
    let ks = [c.b, c.sk, c.hk, c.d];
    let (q, qf) = rounded::<T>(&mut rng, qs.iter().product());
    let (k, kf) = rounded::<T>(&mut rng, ks.iter().product());
    let (v, vf) = rounded::<T>(&mut rng, ks.iter().product());
    let o_layout = if c.layout == Layout::Packed {
        Layout::Contiguous
    } else {
        c.layout
    };
    let po = Placed::new(qs, o_layout == Layout::Padded);
    let (o_pos, o_len) = (po.positions(), po.buffer_len());
    let mut o_buf: CudaSlice<T> = stream.clone_htod(&vec![T::from_f32(f32::NAN); o_len])?;
    let lse_n = c.b * c.h * c.sq;
    let mut lse_buf = stream.clone_htod(&vec![f32::NAN; lse_n + 32])?;
    let params = attn_params(c.causal, None);
    let lse_arg = if c.lse {
        Some(lse_buf.as_view_mut())
    } else {
        None
    };
    let mut o_t = po.view_mut(&mut o_buf);
    if c.layout == Layout::Packed {
        let (s, h, d) = (c.sq, c.h, c.d);
        let pq = Placed {
            shape: qs,
            strides: [s * 3 * h * d, 3 * h * d, d, 1],
            offset: 0,
        };
        let (len, pos) = (pq.buffer_len() + 2 * h * d, pq.positions());
        let mut host = vec![T::from_f32(f32::NAN); len];
        for (i, src) in [&q, &k, &v].into_iter().enumerate() {
            for (&p, &x) in pos.iter().zip(src.iter()) {
                host[p + i * h * d] = x;
            }
        }
        let buf = stream.clone_htod(&host)?;
        let view = |i: usize| Tensor4::strided(buf.slice(i * h * d..), qs, pq.strides);
        rt.forward_into(
            stream,
            &view(0),
            &view(1),
            &view(2),
            &mut o_t,
            lse_arg,
            &params,
        )?;
    } else {
        let padded = c.layout == Layout::Padded;
        let (pq, pk) = (Placed::new(qs, padded), Placed::new(ks, padded));
        let q_d = upload(stream, &pq, &q)?;
        let k_d = upload(stream, &pk, &k)?;
        let v_d = upload(stream, &pk, &v)?;

        rt.forward_into(
            stream,
            &pq.view(&q_d),
            &pk.view(&k_d),
            &pk.view(&v_d),
            &mut o_t,
            lse_arg,
            &params,
        )?;
    }
    let o_host: Vec<T> = stream.clone_dtoh(&o_buf)?;
    let lse_host: Vec<f32> = stream.clone_dtoh(&lse_buf)?;

    let shape = Shape {
        batch: c.b,
        seqlen_q: c.sq,
        seqlen_k: c.sk,
        heads: c.h,
        heads_k: c.hk,
        head_dim: c.d,
    };
    let r = attention_forward(&shape, &qf, &kf, &vf, c.causal, None)?;
    let mut problems = Vec::new();
    let mut in_view = vec![false; o_len];
    o_pos.iter().for_each(|&p| in_view[p] = true);
    let untouched = (0..o_len)
        .filter(|&p| !in_view[p] && !o_host[p].to_f32().is_nan())
        .count();
    if untouched > 0 {
        problems.push(format!("{untouched} o padding elements overwritten"));
    }
    let o: Vec<f64> = o_pos.iter().map(|&p| o_host[p].to_f32() as f64).collect();
    let nan = o.iter().filter(|x| x.is_nan()).count();
    if nan > 0 {
        problems.push(format!("{nan} of {} o elements NaN (unwritten?)", o.len()));
    }
    let o_err = check_o(&o, &r.o, &r.lse, qs, c.dtype, &mut problems);
    let mut lse_err = 0.0f64;
    if c.lse {
        for (i, (&got, &want)) in lse_host.iter().zip(&r.lse).enumerate() {
            let e = lse_abs_err(got, want);
            let e_ok = e <= 1e-3; // false for NaN
            if !e_ok && lse_err <= 1e-3 {
                problems.push(format!("lse[{i}] = {got}, want {want}"));
            }
            lse_err = if e.is_nan() {
                f64::INFINITY
            } else {
                lse_err.max(e)
            };
        }
    }
    if lse_host[lse_n..].iter().any(|x| !x.is_nan())
        || (!c.lse && lse_host.iter().any(|x| !x.is_nan()))
    {
        problems.push("lse written out of bounds".into());
    }
    Ok(Outcome {
        o_err,
        lse_err,
        problems,
    })
}

fn cases() -> Vec<Case> {
    let dims: Vec<usize> = match std::env::var("GPU_FWD_D") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![32, 64, 96, 128, 160, 192, 224, 256, 40, 72, 200, 240],
    };
    let mut v = Vec::new();
    for &d in &dims {
        for dtype in [DType::F16, DType::Bf16] {
            for causal in [false, true] {
                for &(b, sq, sk, h, hk, layout) in &SHAPES {
                    let n = v.len() as u64;
                    v.push(Case {
                        d,
                        dtype,
                        causal,
                        b,
                        sq,
                        sk,
                        h,
                        hk,
                        layout,
                        // skip lse on a rotating quarter of the shapes
                        lse: (n + n / SHAPES.len() as u64) % 4 != 3,
                        seed: 0x5eed ^ (n << 20),
                    });
                }
            }
        }
    }
    v
}

#[test]
fn forward_matches_f64_reference() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let start = std::time::Instant::now();
    let (mut failures, mut worst) = (Vec::new(), [0.0f64; 2]);
    // the same checks on the kernels of GPUs with 99 KiB of shared memory per block (RTX
    // 30/40: the d256 forward's compact tiling) for the cases the d256 kernel serves
    let mut small = FlashAttention::on_device(0).unwrap();
    small.limit_smem(99 * 1024);
    let mut all: Vec<(Case, bool)> = cases().into_iter().map(|c| (c, false)).collect();
    let compact: Vec<(Case, bool)> = all
        .iter()
        .filter(|(c, _)| KernelSpec::kernel_head_dim(c.d as u32) == Some(256))
        .map(|&(c, _)| (c, true))
        .collect();
    all.extend(compact);
    for (c, limited) in &all {
        let rt = if *limited { &small } else { &rt };
        let desc = format!(
            "d={:3} {:4} {:6} b={} sq={:4} sk={:4} h={} hk={} {:10} lse={}{}",
            c.d,
            c.dtype.name(),
            if c.causal { "causal" } else { "full" },
            c.b,
            c.sq,
            c.sk,
            c.h,
            c.hk,
            format!("{:?}", c.layout),
            if c.lse { "y" } else { "n" },
            if *limited { " smem<=99K" } else { "" }
        );
        let res = match c.dtype {
            DType::F16 => run_case::<half::f16>(rt, &stream, c),
            DType::Bf16 => run_case::<half::bf16>(rt, &stream, c),
        };
        report_case(&desc, c.dtype, res, &mut worst, &mut failures);
    }
    println!(
        "\n{} cases in {:.1}s, {} failed; worst o rel-L2: f16 {:.2e}, bf16 {:.2e}",
        all.len(),
        start.elapsed().as_secs_f64(),
        failures.len(),
        worst[0],
        worst[1]
    );
    // the limited runtime ran the compact kernels; the other one only where the GPU
    // lacks the shared memory of the standard d256 forward
    let tilings = |rt: &FlashAttention| -> Vec<Tiling> {
        rt.loaded_specs().iter().map(|s| s.tiling).collect()
    };
    if all.iter().any(|(_, limited)| *limited) {
        assert!(
            tilings(&small).contains(&Tiling::Compact),
            "{:?}",
            small.loaded_specs()
        );
    }
    let d256: KernelSpec = "fa2_fwd_d256_bf16_sm80".parse().unwrap();
    if rt.smem_limit() >= u64::from(d256.smem_bytes()) {
        assert!(!tilings(&rt).contains(&Tiling::Compact));
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Largest `|got - want|` over an lse, where the same infinity counts as equal (NaN and a
/// length mismatch: infinite).
fn lse_max_err(got: &[f32], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    got.iter()
        .zip(want)
        .map(|(&g, &w)| match (g as f64 - w).abs() {
            _ if g as f64 == w => 0.0,
            e if e.is_nan() => f64::INFINITY,
            e => e,
        })
        .fold(0.0, f64::max)
}

/// A problem: (head_dim, dtype, causal, batch, seqlen_q, seqlen_k, heads, heads_k, scale).
type Problem = (
    usize,
    DType,
    bool,
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<f32>,
);

/// The allocating forward of `pr` (inputs contiguous, NaN after their ends) against the
/// reference: the shapes and lengths of what it returns, o (fully masked rows exactly 0)
/// and lse. The problems found.
fn allocating_case<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    pr: &Problem,
    seed: u64,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let &(d, dtype, causal, b, sq, sk, h, hk, scale) = pr;
    let (qs, ks) = ([b, sq, h, d], [b, sk, hk, d]);
    let mut rng = Rng::new(seed);
    let (q, qf) = rounded::<T>(&mut rng, qs.iter().product());
    let (k, kf) = rounded::<T>(&mut rng, ks.iter().product());
    let (v, vf) = rounded::<T>(&mut rng, ks.iter().product());
    let (pq, pk) = (Placed::new(qs, false), Placed::new(ks, false));
    let (q_d, k_d, v_d) = (
        upload(stream, &pq, &q)?,
        upload(stream, &pk, &k)?,
        upload(stream, &pk, &v)?,
    );
    let params = attn_params(causal, scale);
    let out = rt.forward(
        stream,
        &pq.view(&q_d),
        &pk.view(&k_d),
        &pk.view(&v_d),
        &params,
    )?;
    let mut problems = Vec::new();
    let (n, lse_n) = (q.len(), b * h * sq);
    let o_view = out.o();
    if out.shape != qs || o_view.shape() != qs || o_view.strides() != contiguous_strides(qs) {
        problems.push(format!(
            "o shape {:?} / view {:?} strides {:?}, want {qs:?} contiguous",
            out.shape,
            o_view.shape(),
            o_view.strides()
        ));
    }
    if out.o.len() < n || out.lse.len() < lse_n || out.lse().len() != out.lse.len() {
        problems.push(format!(
            "o holds {} (want {n}), lse {} (want {lse_n})",
            out.o.len(),
            out.lse.len()
        ));
    }
    let o_host: Vec<T> = stream.clone_dtoh(&out.o)?;
    let lse_host: Vec<f32> = stream.clone_dtoh(&out.lse)?;
    let shape = Shape::new(b, sq, sk, h, hk, d);
    let r = attention_forward(&shape, &qf, &kf, &vf, causal, scale.map(f64::from))?;
    let o: Vec<f64> = o_host[..n.min(o_host.len())]
        .iter()
        .map(|x| x.to_f32() as f64)
        .collect();
    let o_err = rel_l2(&o, &r.o);
    let ok = o_err <= o_tol(dtype); // false for NaN
    if !ok {
        problems.push(format!("o rel-L2 {o_err:.3e} > {:.0e}", o_tol(dtype)));
    }
    let masked_nonzero = (0..o.len())
        .filter(|&i| r.lse[lse_index(qs, i)] == f64::NEG_INFINITY && o[i] != 0.0)
        .count();
    if masked_nonzero > 0 {
        problems.push(format!(
            "{masked_nonzero} o elements of fully masked rows not 0"
        ));
    }
    let lse_err = lse_max_err(&lse_host[..lse_n.min(lse_host.len())], &r.lse);
    let ok = lse_err <= 1e-3;
    if !ok {
        problems.push(format!("lse max abs error {lse_err:.3e} > 1e-3"));
    }
    println!(
        "allocating d={d:3} {:4} causal={causal:5} b={b} sq={sq:4} sk={sk:4} h={h} hk={hk} \
         scale={scale:?}: o_rel_l2={o_err:.2e} lse_abs={lse_err:.2e}",
        dtype.name()
    );
    Ok(problems)
}

/// `FlashAttention::forward` (which allocates o and lse) on a few cases: causal and not,
/// GQA and MQA, odd lengths both ways, a head dim below its kernel's, a given scale, no
/// keys, both dtypes.
#[test]
fn allocating_forward_matches_f64_reference() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let problems: [Problem; 8] = [
        (64, DType::F16, false, 2, 128, 128, 8, 2, None), // GQA 8/2
        (64, DType::Bf16, true, 2, 128, 128, 8, 2, None),
        (128, DType::Bf16, true, 1, 17, 300, 4, 1, None), // MQA, sq < sk
        (96, DType::F16, true, 2, 333, 77, 4, 2, Some(0.2)), // sq > sk: fully masked rows
        (40, DType::Bf16, false, 1, 1000, 1001, 2, 2, None),
        (256, DType::F16, true, 1, 129, 129, 2, 1, None),
        (128, DType::F16, false, 1, 1, 1000, 4, 1, None), // decode
        (32, DType::Bf16, false, 1, 5, 0, 2, 2, None),    // no keys: o = 0, lse = -inf
    ];
    for_each_problem(
        &problems,
        |pr| pr.1,
        |pr, seed| allocating_case::<half::f16>(&rt, &stream, pr, seed),
        |pr, seed| allocating_case::<half::bf16>(&rt, &stream, pr, seed),
    );
}

/// The same problem through `[b, s, h, d]` tensors (contiguous) and through `[b, h, s, d]`
/// ones (PyTorch's layout: `Tensor4::from_bhsd` inputs into the allocating forward, and
/// `Tensor4Mut::from_bhsd` for o in `forward_into`): the same o and lse, bit for bit (the
/// layout changes only the addresses). The `[b, s, h, d]` o also against the reference.
fn bhsd_case<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    pr: &Problem,
    seed: u64,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let &(d, dtype, causal, b, sq, sk, h, hk, scale) = pr;
    let (qs, ks) = ([b, sq, h, d], [b, sk, hk, d]);
    let (qb, kb) = ([b, h, sq, d], [b, hk, sk, d]); // the [b, h, s, d] buffers' own shapes
    let mut rng = Rng::new(seed);
    let (q, qf) = rounded::<T>(&mut rng, qs.iter().product());
    let (k, kf) = rounded::<T>(&mut rng, ks.iter().product());
    let (v, vf) = rounded::<T>(&mut rng, ks.iter().product());
    let params = attn_params(causal, scale);
    let (q_d, k_d, v_d) = (
        stream.clone_htod(&q)?,
        stream.clone_htod(&k)?,
        stream.clone_htod(&v)?,
    );
    let bshd = rt.forward(
        stream,
        &Tensor4::contiguous(&q_d, qs),
        &Tensor4::contiguous(&k_d, ks),
        &Tensor4::contiguous(&v_d, ks),
        &params,
    )?;
    let (qt, kt, vt) = (
        stream.clone_htod(&bshd_to_bhsd(&q, qs))?,
        stream.clone_htod(&bshd_to_bhsd(&k, ks))?,
        stream.clone_htod(&bshd_to_bhsd(&v, ks))?,
    );
    let (tq, tk, tv) = (
        Tensor4::from_bhsd(&qt, qb),
        Tensor4::from_bhsd(&kt, kb),
        Tensor4::from_bhsd(&vt, kb),
    );
    let mut problems = Vec::new();
    if tq.shape() != qs || tk.shape() != ks {
        problems.push(format!(
            "from_bhsd shapes {:?} {:?}",
            tq.shape(),
            tk.shape()
        ));
    }
    let bhsd = rt.forward(stream, &tq, &tk, &tv, &params)?;
    // o in [b, h, s, d] too, written into a NaN-filled buffer
    let mut o_t = stream.clone_htod(&vec![T::from_f32(f32::NAN); q.len()])?;
    let mut lse_t = stream.clone_htod(&vec![f32::NAN; b * h * sq])?;
    let mut o_view = Tensor4Mut::from_bhsd(&mut o_t, qb);
    rt.forward_into(
        stream,
        &tq,
        &tk,
        &tv,
        &mut o_view,
        Some(lse_t.as_view_mut()),
        &params,
    )?;

    let bits = |x: &[T]| -> Vec<u32> { x.iter().map(|v| v.to_f32().to_bits()).collect() };
    let fbits = |x: &[f32]| -> Vec<u32> { x.iter().map(|v| v.to_bits()).collect() };
    let (o_want, lse_want): (Vec<T>, Vec<f32>) =
        (stream.clone_dtoh(&bshd.o)?, stream.clone_dtoh(&bshd.lse)?);
    let o_got: Vec<T> = stream.clone_dtoh(&bhsd.o)?;
    let o_t_host: Vec<T> = bhsd_to_bshd(&stream.clone_dtoh(&o_t)?, qs);
    for (what, got) in [("from_bhsd inputs: o", &o_got), ("from_bhsd o", &o_t_host)] {
        if bits(got) != bits(&o_want) {
            let n = got
                .iter()
                .zip(&o_want)
                .filter(|(a, b)| a.to_f32().to_bits() != b.to_f32().to_bits())
                .count();
            problems.push(format!(
                "{what}: {n} elements differ from the [b, s, h, d] call's"
            ));
        }
    }
    for (what, lse) in [
        ("from_bhsd inputs: lse", stream.clone_dtoh(&bhsd.lse)?),
        ("from_bhsd o: lse", stream.clone_dtoh(&lse_t)?),
    ] {
        if fbits(&lse) != fbits(&lse_want) {
            problems.push(format!("{what} differs from the [b, s, h, d] call's"));
        }
    }
    let shape = Shape::new(b, sq, sk, h, hk, d);
    let r = attention_forward(&shape, &qf, &kf, &vf, causal, scale.map(f64::from))?;
    let o_f: Vec<f64> = o_want.iter().map(|x| x.to_f32() as f64).collect();
    let o_err = rel_l2(&o_f, &r.o);
    let ok = o_err <= o_tol(dtype); // false for NaN
    if !ok {
        problems.push(format!("o rel-L2 {o_err:.3e} > {:.0e}", o_tol(dtype)));
    }
    println!(
        "bhsd d={d:3} {:4} causal={causal:5} b={b} sq={sq:4} sk={sk:4} h={h} hk={hk}: \
         o_rel_l2={o_err:.2e} {}",
        dtype.name(),
        if problems.is_empty() {
            "same bits"
        } else {
            "DIFFERENT"
        }
    );
    Ok(problems)
}

#[test]
fn bhsd_tensors_match_bshd_tensors() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let problems: [Problem; 5] = [
        (64, DType::F16, true, 2, 77, 131, 4, 2, None), // GQA, odd lengths
        (128, DType::Bf16, false, 1, 200, 200, 8, 2, None),
        (96, DType::Bf16, true, 2, 131, 77, 2, 1, Some(0.25)), // MQA, fully masked rows
        (256, DType::F16, false, 1, 65, 33, 2, 2, None),
        (40, DType::F16, false, 3, 1, 300, 2, 1, None), // one query row: s-stride unused
    ];
    for_each_problem(
        &problems,
        |pr| pr.1,
        |pr, seed| bhsd_case::<half::f16>(&rt, &stream, pr, seed),
        |pr, seed| bhsd_case::<half::bf16>(&rt, &stream, pr, seed),
    );
}
