//! GPU (feature `gpu`): the backward kernels against the f64 CPU reference over head dims
//! (8 kernels + 40, 72, 120, 248: head dims below their kernel's, 120 and 248 on kernels
//! whose dQ warps split the columns into groups) x dtypes x causal x shapes (seqlen
//! 1..2061, sq != sk both ways, GQA 8/2, MQA, batch > 1, seqlen_k = 0 and seqlen_q = 0) x layouts (contiguous, padded
//! strides, packed qkv inputs with padded gradients).
//! Per case: fresh random inputs; our forward gives o and lse; dq/dk/dv buffers are poisoned
//! with NaN; after the backward every element of each view must be written (no NaN; dq of
//! fully masked rows exactly 0), every padding element untouched, and the rel-L2 error vs
//! the f64 reference (from the rounded q, k, v, dO) <= 3.5e-3 (bf16) / 4.5e-4 (f16).
//! Atomic mode on every case, twice with one scratch (the second call on the accumulator
//! the first left its sums in); deterministic mode too on a third of them (accuracy, and
//! two runs bitwise equal). `GPU_BWD_D=64,128` limits the head dims.
//! Those run the preallocated `forward_into` / `backward_into`; the allocating `forward` /
//! `backward` are checked against the reference on a few cases, and `[b, h, s, d]`
//! (PyTorch) tensors through `Tensor4::from_bhsd` / `Tensor4Mut::from_bhsd` against the
//! same `[b, s, h, d]` ones.
#![cfg(feature = "gpu")]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use flash_codegen::DType;
use flash_runtime::reference::{Shape, attention_backward, last_visible_key, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::tensor::contiguous_strides;
use flash_runtime::{
    BwdInputs, BwdOptions, BwdScratch, Element, FlashAttention, Gradients, GradsMut, Tensor4,
    Tensor4Mut,
};

mod gpu_support;
use gpu_support::{
    Placed, attn_params, bhsd_to_bshd, bshd_to_bhsd, for_each_problem, rounded, upload,
};

type Error = Box<dyn std::error::Error>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Contiguous,
    /// Gaps after each head, row and batch, and a 16-byte offset.
    Padded,
    /// q, k, v sliced out of one `[b, s, 3, h, d]` buffer; o, dO contiguous; grads padded.
    Packed,
}

/// (batch, seqlen_q, seqlen_k, heads, heads_k, layout)
const SHAPES: [(usize, usize, usize, usize, usize, Layout); 15] = [
    (2, 1, 1, 2, 2, Layout::Contiguous),
    (1, 17, 17, 4, 2, Layout::Padded),
    (2, 128, 128, 8, 2, Layout::Contiguous), // GQA 8/2
    (1, 1000, 1000, 4, 1, Layout::Padded),   // MQA
    (1, 2061, 2061, 1, 1, Layout::Contiguous),
    (3, 17, 128, 2, 2, Layout::Contiguous), // sq < sk
    (2, 128, 17, 2, 1, Layout::Padded),     // sq > sk: causal rows fully masked
    (1, 1, 1000, 4, 1, Layout::Contiguous),
    (1, 1000, 2061, 2, 1, Layout::Contiguous),
    (1, 2061, 1000, 1, 1, Layout::Padded),
    (2, 300, 300, 4, 4, Layout::Packed),
    (1, 5, 0, 2, 2, Layout::Padded), // no keys: dq = 0 (zero-filled)
    (2, 0, 7, 2, 1, Layout::Contiguous), // no queries: dk = dv = 0 (zero-filled)
    (1, 257, 300, 28, 4, Layout::Padded), // GQA 7: splits that do not divide the group
    (2, 64, 65, 16, 1, Layout::Contiguous), // MQA 16: up to 16 splits
];

#[derive(Clone, Copy, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    shape: Shape,
    layout: Layout,
    deterministic: bool,
    /// The grouped-query split ([`BwdOptions::group_splits`]): automatic, one CTA per
    /// group, or two (rotating over the cases).
    group_splits: Option<u32>,
    seed: u64,
}

/// One gradient's check: padding untouched, no NaN, rel-L2 vs `want`; the logical values.
fn check<T: Element>(
    name: &str,
    host: &[T],
    p: &Placed,
    want: &[f64],
    tol: f64,
) -> (f64, Vec<String>) {
    let pos = p.positions();
    let mut problems = Vec::new();
    let mut in_view = vec![false; host.len()];
    pos.iter().for_each(|&i| in_view[i] = true);
    let touched = (0..host.len())
        .filter(|&i| !in_view[i] && !host[i].to_f32().is_nan())
        .count();
    if touched > 0 {
        problems.push(format!("{touched} {name} padding elements overwritten"));
    }
    let got: Vec<f64> = pos.iter().map(|&i| host[i].to_f32() as f64).collect();
    let nan = got.iter().filter(|x| x.is_nan()).count();
    if nan > 0 {
        problems.push(format!(
            "{nan} of {} {name} elements NaN (unwritten?)",
            got.len()
        ));
    }
    let err = rel_l2(&got, want);
    let ok = err <= tol; // false for NaN
    if !ok {
        problems.push(format!("{name} rel-L2 {err:.3e} > {tol:.1e}"));
    }
    (err, problems)
}

struct Outcome {
    errs: [f64; 3],
    problems: Vec<String>,
}

fn run_case<T: Element>(
    rt: &FlashAttention,
    st: &Arc<CudaStream>,
    c: &Case,
) -> Result<Outcome, Error> {
    let sh = c.shape;
    let (qs, ks) = (
        [sh.batch, sh.seqlen_q, sh.heads, c.d],
        [sh.batch, sh.seqlen_k, sh.heads_k, c.d],
    );
    let mut rng = Rng::new(c.seed);
    let (q, qf) = rounded::<T>(&mut rng, sh.q_len());
    let (k, kf) = rounded::<T>(&mut rng, sh.kv_len());
    let (v, vf) = rounded::<T>(&mut rng, sh.kv_len());
    let (d_o, dof) = rounded::<T>(&mut rng, sh.q_len());
    let padded = c.layout == Layout::Padded;
    let (po, pq, pk) = (
        Placed::new(qs, padded),
        Placed::new(qs, padded),
        Placed::new(ks, padded),
    );
    // inputs: one buffer per tensor, or q, k, v packed in one [b, s, 3, h, d] buffer
    let (bufs, places) = if c.layout == Layout::Packed {
        let hd = sh.heads * c.d;
        let at = |i: usize| Placed {
            shape: qs,
            strides: [sh.seqlen_q * 3 * hd, 3 * hd, c.d, 1],
            offset: i * hd,
        };
        let mut host = vec![T::from_f32(f32::NAN); at(2).buffer_len()];
        for (i, src) in [&q, &k, &v].into_iter().enumerate() {
            for (&p, &x) in at(i).positions().iter().zip(src) {
                host[p] = x;
            }
        }
        (
            vec![st.clone_htod(&host)?],
            [(0, at(0)), (0, at(1)), (0, at(2))],
        )
    } else {
        let bufs = vec![
            upload(st, &pq, &q)?,
            upload(st, &pk, &k)?,
            upload(st, &pk, &v)?,
        ];
        (bufs, [(0, pq), (1, pk), (2, pk)])
    };
    let [qv, kv, vv] = places.map(|(b, p)| p.view(&bufs[b]));
    let do_buf = upload(st, &po, &d_o)?;
    let mut o_buf = upload(st, &po, &vec![T::from_f32(f32::NAN); sh.q_len()])?;
    let mut lse = st.clone_htod(&vec![f32::NAN; sh.lse_len() + 8])?;
    let params = attn_params(c.causal, None); // both passes
    let mut o_t = po.view_mut(&mut o_buf);
    rt.forward_into(
        st,
        &qv,
        &kv,
        &vv,
        &mut o_t,
        Some(lse.as_view_mut()),
        &params,
    )?;

    let r = attention_backward(&sh, &qf, &kf, &vf, &dof, c.causal, None)?;
    let tol = [4.5e-4, 3.5e-3][(c.dtype == DType::Bf16) as usize];
    let gpad = c.layout != Layout::Contiguous;
    let (pdq, pdk) = (Placed::new(qs, gpad), Placed::new(ks, gpad));
    let mut scratch = BwdScratch::new(st, qs, false)?;
    let mut run = |deterministic: bool| -> Result<[Vec<T>; 3], Error> {
        let nan = |p: &Placed| st.clone_htod(&vec![T::from_f32(f32::NAN); p.buffer_len()]);
        let (mut dq, mut dk, mut dv) = (nan(&pdq)?, nan(&pdk)?, nan(&pdk)?);
        let opts = match deterministic {
            true => BwdOptions::deterministic(),
            false => BwdOptions::default(),
        };
        let opts = match c.group_splits {
            Some(n) => opts.with_group_splits(n),
            None => opts,
        };
        // one scratch for every call (atomic mode runs twice below: its accumulator is
        // zeroed again by the second call's preprocess)
        let s = Some(&mut scratch);
        let o = po.view(&o_buf);
        let (mut gq, mut gk, mut gv) = (
            pdq.view_mut(&mut dq),
            pdk.view_mut(&mut dk),
            pdk.view_mut(&mut dv),
        );
        let (dov, lse) = (po.view(&do_buf), lse.as_view());
        let inputs = BwdInputs {
            q: &qv,
            k: &kv,
            v: &vv,
            o: &o,
            lse: &lse,
            d_o: &dov,
        };
        let grads = GradsMut {
            dq: &mut gq,
            dk: &mut gk,
            dv: &mut gv,
        };
        rt.backward_into(st, inputs, grads, &params, &opts, s)?;
        Ok([
            st.clone_dtoh(&dq)?,
            st.clone_dtoh(&dk)?,
            st.clone_dtoh(&dv)?,
        ])
    };
    let mut errs = [0.0f64; 3];
    let mut problems = Vec::new();
    let modes = [(false, ""), (false, "again "), (true, "det ")];
    for (det, tag) in modes.into_iter().take(2 + c.deterministic as usize) {
        let got = run(det)?;
        for (i, (name, want)) in [("dq", &r.dq), ("dk", &r.dk), ("dv", &r.dv)]
            .into_iter()
            .enumerate()
        {
            let p = if i == 0 { &pdq } else { &pdk };
            let (e, pr) = check(name, &got[i], p, want, tol);
            errs[i] = errs[i].max(if e.is_nan() { f64::INFINITY } else { e });
            problems.extend(pr.into_iter().map(|x| format!("{tag}{x}")));
        }
        let d = c.d;
        let masked_nonzero = pdq
            .positions()
            .iter()
            .enumerate()
            .filter(|&(i, &p)| {
                let row = (i / d / sh.heads) % sh.seqlen_q.max(1);
                let masked = last_visible_key(row, sh.seqlen_q, sh.seqlen_k, c.causal).is_none();
                masked && got[0][p].to_f32() != 0.0
            })
            .count();
        if masked_nonzero > 0 {
            problems.push(format!(
                "{tag}{masked_nonzero} dq elements of fully masked rows not 0"
            ));
        }
        if det {
            let again = run(true)?;
            let bits = |x: &[T]| x.iter().map(|v| v.to_f32().to_bits()).collect::<Vec<_>>();
            for (name, (a, b)) in ["dq", "dk", "dv"].iter().zip(got.iter().zip(&again)) {
                if bits(a) != bits(b) {
                    problems.push(format!("det {name} differs between two runs"));
                }
            }
        }
    }
    Ok(Outcome { errs, problems })
}

fn cases() -> Vec<Case> {
    let dims: Vec<usize> = match std::env::var("GPU_BWD_D") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![32, 64, 96, 128, 160, 192, 224, 256, 40, 72, 120, 248],
    };
    let mut v = Vec::new();
    for &d in &dims {
        for dtype in [DType::F16, DType::Bf16] {
            for causal in [false, true] {
                for &(b, sq, sk, h, hk, layout) in &SHAPES {
                    let n = v.len() as u64;
                    let shape = Shape {
                        batch: b,
                        seqlen_q: sq,
                        seqlen_k: sk,
                        heads: h,
                        heads_k: hk,
                        head_dim: d,
                    };
                    v.push(Case {
                        d,
                        dtype,
                        causal,
                        shape,
                        layout,
                        // a rotating third of the cases also runs deterministic mode
                        deterministic: (n + n / SHAPES.len() as u64) % 3 == 0,
                        group_splits: [None, Some(1), Some(2)][(n / 7 % 3) as usize],
                        seed: 0xb0d ^ (n << 20),
                    });
                }
            }
        }
    }
    v
}

#[test]
fn backward_matches_f64_reference() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let start = std::time::Instant::now();
    let (mut failures, mut worst) = (Vec::new(), [[0.0f64; 3]; 2]);
    let all = cases();
    for c in &all {
        let s = c.shape;
        let desc = format!(
            "d={:3} {:4} {:6} b={} sq={:4} sk={:4} h={} hk={} {:10} {} splits {:?}",
            c.d,
            c.dtype.name(),
            if c.causal { "causal" } else { "full" },
            s.batch,
            s.seqlen_q,
            s.seqlen_k,
            s.heads,
            s.heads_k,
            format!("{:?}", c.layout),
            if c.deterministic {
                "atomic+det"
            } else {
                "atomic"
            },
            c.group_splits
        );
        let res = match c.dtype {
            DType::F16 => run_case::<half::f16>(&rt, &stream, c),
            DType::Bf16 => run_case::<half::bf16>(&rt, &stream, c),
        };
        match res {
            Ok(out) => {
                let w = &mut worst[(c.dtype == DType::Bf16) as usize];
                for (w, e) in w.iter_mut().zip(out.errs) {
                    *w = w.max(e);
                }
                let status = if out.problems.is_empty() {
                    "ok".into()
                } else {
                    out.problems.join("; ")
                };
                let [dq, dk, dv] = out.errs;
                println!("{desc}  dq={dq:.2e} dk={dk:.2e} dv={dv:.2e}  {status}");
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
    let fmt = |w: [f64; 3]| format!("dq {:.2e} dk {:.2e} dv {:.2e}", w[0], w[1], w[2]);
    println!(
        "\n{} cases in {:.1}s, {} failed; worst rel-L2: f16 {}; bf16 {}",
        all.len(),
        start.elapsed().as_secs_f64(),
        failures.len(),
        fmt(worst[0]),
        fmt(worst[1])
    );
    gpu_support::print_tilings(&rt);
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A problem: (head_dim, dtype, causal, batch, seqlen_q, seqlen_k, heads, heads_k, scale,
/// deterministic mode too).
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
    bool,
);

fn shape_of(pr: &Problem) -> Shape {
    let &(d, _, _, b, sq, sk, h, hk, _, _) = pr;
    Shape::new(b, sq, sk, h, hk, d)
}

/// The gradients' rel-L2 tolerance of `dtype`.
fn grad_tol(dtype: DType) -> f64 {
    [4.5e-4, 3.5e-3][(dtype == DType::Bf16) as usize]
}

/// How many dq elements (logical `[b, sq, h, d]` values) of fully masked rows are not 0.
fn masked_nonzero<T: Element>(dq: &[T], sh: &Shape, causal: bool) -> usize {
    dq.iter()
        .enumerate()
        .filter(|&(i, x)| {
            let row = (i / sh.head_dim / sh.heads) % sh.seqlen_q.max(1);
            let masked = last_visible_key(row, sh.seqlen_q, sh.seqlen_k, causal).is_none();
            masked && x.to_f32() != 0.0
        })
        .count()
}

/// The backward's mode.
/// dq, dk and dv of an allocating backward, on the host.
fn grads_host<T: Element>(st: &Arc<CudaStream>, g: &Gradients<T>) -> Result<[Vec<T>; 3], Error> {
    Ok([
        st.clone_dtoh(&g.dq)?,
        st.clone_dtoh(&g.dk)?,
        st.clone_dtoh(&g.dv)?,
    ])
}

fn opts_of(deterministic: bool) -> BwdOptions {
    match deterministic {
        true => BwdOptions::deterministic(),
        false => BwdOptions::default(),
    }
}

/// The allocating forward and backward of `pr` (inputs contiguous, NaN after their ends),
/// atomic mode and, if asked, deterministic mode, against the reference: the shapes of
/// what the backward returns, each gradient (no NaN, rel-L2; dq of fully masked rows
/// exactly 0). The problems found.
fn allocating_case<T: Element>(
    rt: &FlashAttention,
    st: &Arc<CudaStream>,
    pr: &Problem,
    seed: u64,
) -> Result<Vec<String>, Error> {
    let &(d, dtype, causal, _, _, _, _, _, scale, det) = pr;
    let sh = shape_of(pr);
    let (qs, ks) = (
        [sh.batch, sh.seqlen_q, sh.heads, d],
        [sh.batch, sh.seqlen_k, sh.heads_k, d],
    );
    let mut rng = Rng::new(seed);
    let (q, qf) = rounded::<T>(&mut rng, sh.q_len());
    let (k, kf) = rounded::<T>(&mut rng, sh.kv_len());
    let (v, vf) = rounded::<T>(&mut rng, sh.kv_len());
    let (d_o, dof) = rounded::<T>(&mut rng, sh.q_len());
    let (pq, pk) = (Placed::new(qs, false), Placed::new(ks, false));
    let (q_d, k_d, v_d, do_d) = (
        upload(st, &pq, &q)?,
        upload(st, &pk, &k)?,
        upload(st, &pk, &v)?,
        upload(st, &pq, &d_o)?,
    );
    let (tq, tk, tv, tdo) = (pq.view(&q_d), pk.view(&k_d), pk.view(&v_d), pq.view(&do_d));
    let params = attn_params(causal, scale);
    let fwd = rt.forward(st, &tq, &tk, &tv, &params)?;
    let (o, lse) = (fwd.o(), fwd.lse());
    let inputs = BwdInputs {
        q: &tq,
        k: &tk,
        v: &tv,
        o: &o,
        lse: &lse,
        d_o: &tdo,
    };
    let r = attention_backward(&sh, &qf, &kf, &vf, &dof, causal, scale.map(f64::from))?;
    let tol = grad_tol(dtype);
    let mut problems = Vec::new();
    for det in [false, true].into_iter().take(1 + det as usize) {
        let tag = if det { "det " } else { "" };
        let g = rt.backward(st, inputs, &params, &opts_of(det))?;
        let shapes = [g.dq().shape(), g.dk().shape(), g.dv().shape()];
        let strides = [g.dq().strides(), g.dk().strides(), g.dv().strides()];
        let want = [qs, ks, ks];
        if (g.q_shape, g.kv_shape) != (qs, ks)
            || shapes != want
            || strides != want.map(contiguous_strides)
        {
            problems.push(format!(
                "{tag}shapes {:?} {:?}, views {shapes:?} strides {strides:?}",
                g.q_shape, g.kv_shape
            ));
        }
        let mut errs = [0.0; 3];
        for (i, (name, buf, want, p)) in [
            ("dq", &g.dq, &r.dq, &pq),
            ("dk", &g.dk, &r.dk, &pk),
            ("dv", &g.dv, &r.dv, &pk),
        ]
        .into_iter()
        .enumerate()
        {
            let host: Vec<T> = st.clone_dtoh(buf)?;
            let n = want.len();
            if host.len() < n {
                problems.push(format!("{tag}{name} holds {} of {n} elements", host.len()));
                continue;
            }
            let (e, pr) = check(name, &host[..n], p, want, tol);
            errs[i] = e;
            problems.extend(pr.into_iter().map(|x| format!("{tag}{x}")));
            if i == 0 {
                let m = masked_nonzero(&host[..n], &sh, causal);
                if m > 0 {
                    problems.push(format!("{tag}{m} dq elements of fully masked rows not 0"));
                }
            }
        }
        let [dq, dk, dv] = errs;
        println!(
            "allocating d={d:3} {:4} causal={causal:5} {:?} scale={scale:?} {}: dq={dq:.2e} \
             dk={dk:.2e} dv={dv:.2e}",
            dtype.name(),
            [sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.heads_k],
            if det { "deterministic" } else { "atomic" }
        );
    }
    Ok(problems)
}

/// `FlashAttention::forward` then `FlashAttention::backward` (both allocate their outputs;
/// the backward its scratch too) on a few cases: causal and not, GQA and MQA, odd lengths
/// both ways, a head dim below its kernel's, a given scale, no keys and no queries (the
/// zero-filled gradients), both dtypes, both modes.
#[test]
fn allocating_backward_matches_f64_reference() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let problems: [Problem; 8] = [
        (64, DType::F16, false, 2, 128, 128, 8, 2, None, true), // GQA 8/2
        (64, DType::Bf16, true, 2, 128, 128, 8, 2, None, false),
        (128, DType::Bf16, true, 1, 17, 300, 4, 1, None, true), // MQA, sq < sk
        (96, DType::F16, true, 2, 333, 77, 4, 2, Some(0.2), true), // sq > sk: masked rows
        (40, DType::Bf16, false, 1, 1000, 1001, 2, 2, None, false),
        (256, DType::F16, true, 1, 129, 129, 2, 1, None, true),
        (32, DType::Bf16, false, 1, 5, 0, 2, 2, None, true), // no keys: dq = 0
        (64, DType::F16, true, 2, 0, 7, 2, 1, None, false),  // no queries: dk = dv = 0
    ];
    for_each_problem(
        &problems,
        |pr| pr.1,
        |pr, seed| allocating_case::<half::f16>(&rt, &stream, pr, seed),
        |pr, seed| allocating_case::<half::bf16>(&rt, &stream, pr, seed),
    );
}

/// The same problem through `[b, s, h, d]` tensors (contiguous) and through `[b, h, s, d]`
/// ones (PyTorch's layout): `Tensor4::from_bhsd` q, k, v, dO into the allocating calls,
/// and everything in that layout (o through `forward_into`, dq, dk, dv through
/// `backward_into`, all `Tensor4Mut::from_bhsd` into NaN-filled buffers). Deterministic
/// mode: the same gradients, bit for bit (the layout changes only the addresses); atomic
/// mode with `[b, h, s, d]` inputs, and the `[b, s, h, d]` gradients, against the reference.
fn bhsd_case<T: Element>(
    rt: &FlashAttention,
    st: &Arc<CudaStream>,
    pr: &Problem,
    seed: u64,
) -> Result<Vec<String>, Error> {
    let &(d, dtype, causal, _, _, _, _, _, scale, _) = pr;
    let sh = shape_of(pr);
    let (b, sq, sk, h, hk) = (sh.batch, sh.seqlen_q, sh.seqlen_k, sh.heads, sh.heads_k);
    let (qs, ks) = ([b, sq, h, d], [b, sk, hk, d]);
    let (qb, kb) = ([b, h, sq, d], [b, hk, sk, d]); // the [b, h, s, d] buffers' own shapes
    let mut rng = Rng::new(seed);
    let (q, qf) = rounded::<T>(&mut rng, sh.q_len());
    let (k, kf) = rounded::<T>(&mut rng, sh.kv_len());
    let (v, vf) = rounded::<T>(&mut rng, sh.kv_len());
    let (d_o, dof) = rounded::<T>(&mut rng, sh.q_len());
    let params = attn_params(causal, scale);
    let det = BwdOptions::deterministic();

    // [b, s, h, d]
    let (q_d, k_d, v_d, do_d) = (
        st.clone_htod(&q)?,
        st.clone_htod(&k)?,
        st.clone_htod(&v)?,
        st.clone_htod(&d_o)?,
    );
    let (tq, tk, tv, tdo) = (
        Tensor4::contiguous(&q_d, qs),
        Tensor4::contiguous(&k_d, ks),
        Tensor4::contiguous(&v_d, ks),
        Tensor4::contiguous(&do_d, qs),
    );
    let fwd = rt.forward(st, &tq, &tk, &tv, &params)?;
    let (o, lse) = (fwd.o(), fwd.lse());
    let bshd = BwdInputs {
        q: &tq,
        k: &tk,
        v: &tv,
        o: &o,
        lse: &lse,
        d_o: &tdo,
    };
    let want = rt.backward(st, bshd, &params, &det)?;
    let want: [Vec<T>; 3] = grads_host(st, &want)?;

    // [b, h, s, d] inputs, o and lse from the allocating forward
    let (qt, kt, vt, dot) = (
        st.clone_htod(&bshd_to_bhsd(&q, qs))?,
        st.clone_htod(&bshd_to_bhsd(&k, ks))?,
        st.clone_htod(&bshd_to_bhsd(&v, ks))?,
        st.clone_htod(&bshd_to_bhsd(&d_o, qs))?,
    );
    let (bq, bk, bv, bdo) = (
        Tensor4::from_bhsd(&qt, qb),
        Tensor4::from_bhsd(&kt, kb),
        Tensor4::from_bhsd(&vt, kb),
        Tensor4::from_bhsd(&dot, qb),
    );
    let fwd_b = rt.forward(st, &bq, &bk, &bv, &params)?;
    let (o_b, lse_b) = (fwd_b.o(), fwd_b.lse());
    let inputs = BwdInputs {
        q: &bq,
        k: &bk,
        v: &bv,
        o: &o_b,
        lse: &lse_b,
        d_o: &bdo,
    };
    let g = rt.backward(st, inputs, &params, &det)?;
    let from_inputs: [Vec<T>; 3] = grads_host(st, &g)?;
    let atomic = rt.backward(st, inputs, &params, &BwdOptions::default())?;
    let atomic: [Vec<T>; 3] = grads_host(st, &atomic)?;

    // everything [b, h, s, d], preallocated
    let nan = |n: usize| st.clone_htod(&vec![T::from_f32(f32::NAN); n]);
    let mut o_t = nan(sh.q_len())?;
    let mut lse_t = st.clone_htod(&vec![f32::NAN; sh.lse_len()])?;
    rt.forward_into(
        st,
        &bq,
        &bk,
        &bv,
        &mut Tensor4Mut::from_bhsd(&mut o_t, qb),
        Some(lse_t.as_view_mut()),
        &params,
    )?;
    let (mut dq_t, mut dk_t, mut dv_t) = (nan(sh.q_len())?, nan(sh.kv_len())?, nan(sh.kv_len())?);
    let (o_tv, lse_tv) = (Tensor4::from_bhsd(&o_t, qb), lse_t.as_view());
    rt.backward_into(
        st,
        BwdInputs {
            o: &o_tv,
            lse: &lse_tv,
            ..inputs
        },
        GradsMut {
            dq: &mut Tensor4Mut::from_bhsd(&mut dq_t, qb),
            dk: &mut Tensor4Mut::from_bhsd(&mut dk_t, kb),
            dv: &mut Tensor4Mut::from_bhsd(&mut dv_t, kb),
        },
        &params,
        &det,
        None,
    )?;
    let all_bhsd: [Vec<T>; 3] = [
        bhsd_to_bshd(&st.clone_dtoh(&dq_t)?, qs),
        bhsd_to_bshd(&st.clone_dtoh(&dk_t)?, ks),
        bhsd_to_bshd(&st.clone_dtoh(&dv_t)?, ks),
    ];

    let mut problems = Vec::new();
    let bits = |x: &[T]| -> Vec<u32> { x.iter().map(|v| v.to_f32().to_bits()).collect() };
    let names = ["dq", "dk", "dv"];
    for (what, got) in [
        ("from_bhsd inputs", &from_inputs),
        ("all from_bhsd", &all_bhsd),
    ] {
        for ((name, g), w) in names.iter().zip(got).zip(&want) {
            if bits(g) != bits(w) {
                let n = g
                    .iter()
                    .zip(w)
                    .filter(|(a, b)| a.to_f32().to_bits() != b.to_f32().to_bits())
                    .count();
                problems.push(format!(
                    "{what}: {n} det {name} elements differ from the [b, s, h, d] call's"
                ));
            }
        }
    }
    let r = attention_backward(&sh, &qf, &kf, &vf, &dof, causal, scale.map(f64::from))?;
    let tol = grad_tol(dtype);
    let mut errs = [[0.0; 3]; 2];
    for (j, (what, got)) in [
        ("det [b, s, h, d]", &want),
        ("atomic from_bhsd inputs", &atomic),
    ]
    .into_iter()
    .enumerate()
    {
        for (i, (g, w)) in got.iter().zip([&r.dq, &r.dk, &r.dv]).enumerate() {
            let p = Placed::new(if i == 0 { qs } else { ks }, false);
            let (e, pr) = check(names[i], &g[..w.len()], &p, w, tol);
            errs[j][i] = e;
            problems.extend(pr.into_iter().map(|x| format!("{what}: {x}")));
        }
    }
    let fmt = |e: [f64; 3]| format!("dq={:.2e} dk={:.2e} dv={:.2e}", e[0], e[1], e[2]);
    println!(
        "bhsd d={d:3} {:4} causal={causal:5} {:?}: det {} atomic {} {}",
        dtype.name(),
        [b, sq, sk, h, hk],
        fmt(errs[0]),
        fmt(errs[1]),
        if problems.is_empty() {
            "ok, same bits"
        } else {
            "FAILED"
        }
    );
    Ok(problems)
}

#[test]
fn bhsd_tensors_match_bshd_tensors() {
    let rt = gpu_support::device();
    let stream = rt.context().default_stream();
    let problems: [Problem; 5] = [
        (64, DType::F16, true, 2, 77, 131, 4, 2, None, true), // GQA, odd lengths
        (128, DType::Bf16, false, 1, 200, 200, 8, 2, None, true),
        (96, DType::Bf16, true, 2, 131, 77, 2, 1, None, true), // MQA, masked rows
        (256, DType::F16, false, 1, 65, 33, 2, 2, None, true),
        (40, DType::F16, false, 3, 1, 300, 2, 1, None, true), // one query row
    ];
    for_each_problem(
        &problems,
        |pr| pr.1,
        |pr, seed| bhsd_case::<half::f16>(&rt, &stream, pr, seed),
        |pr, seed| bhsd_case::<half::bf16>(&rt, &stream, pr, seed),
    );
}
