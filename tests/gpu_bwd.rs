//! GPU (feature `gpu`): the backward kernels against the f64 CPU reference over head dims
//! (8 kernels + 40, 72, 120, 248: head dims below their kernel's, 120 and 248 on kernels
//! whose dQ warps split the columns into groups) x dtypes x causal x shapes (seqlen
//! 1..2061, sq != sk both ways, GQA 8/2, MQA, batch > 1, seqlen_k = 0 and seqlen_q = 0) x layouts (contiguous, padded
//! strides, packed qkv inputs with padded gradients).
//! Per case: fresh random inputs; our forward gives o and lse; dq/dk/dv buffers are poisoned
//! with NaN; after the backward every element of each view must be written (no NaN; dq of
//! fully masked rows exactly 0), every padding element untouched, and the rel-L2 error vs
//! the f64 reference (from the rounded q, k, v, dO) <= 3.5e-3 (bf16) / 4.5e-4 (f16).
//! Atomic mode on every case; deterministic mode too on a third of them (accuracy, and two
//! runs bitwise equal). `GPU_BWD_D=64,128` limits the head dims.
#![cfg(feature = "gpu")]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use flash_codegen::DType;
use flash_runtime::reference::{Shape, attention_backward, last_visible_key, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::{BwdParams, BwdScratch, Element, FlashAttention, FwdParams};

mod gpu_support;
use gpu_support::{Placed, rounded, upload};

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
const SHAPES: [(usize, usize, usize, usize, usize, Layout); 13] = [
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
];

#[derive(Clone, Copy, Debug)]
struct Case {
    d: usize,
    dtype: DType,
    causal: bool,
    shape: Shape,
    layout: Layout,
    deterministic: bool,
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
    let fwd = FwdParams {
        causal: c.causal,
        softmax_scale: None,
    };
    let mut o_t = po.view_mut(&mut o_buf);
    rt.forward(st, &qv, &kv, &vv, &mut o_t, Some(&mut lse), &fwd)?;

    let r = attention_backward(&sh, &qf, &kf, &vf, &dof, c.causal, None)?;
    let tol = [4.5e-4, 3.5e-3][(c.dtype == DType::Bf16) as usize];
    let gpad = c.layout != Layout::Contiguous;
    let (pdq, pdk) = (Placed::new(qs, gpad), Placed::new(ks, gpad));
    let mut scratch = BwdScratch::new(st, qs, false)?;
    let mut run = |deterministic: bool| -> Result<[Vec<T>; 3], Error> {
        let nan = |p: &Placed| st.clone_htod(&vec![T::from_f32(f32::NAN); p.buffer_len()]);
        let (mut dq, mut dk, mut dv) = (nan(&pdq)?, nan(&pdk)?, nan(&pdk)?);
        let p = BwdParams {
            causal: c.causal,
            softmax_scale: None,
            deterministic,
        };
        // atomic mode allocates its scratch; deterministic mode reuses one
        let s = deterministic.then_some(&mut scratch);
        let o = po.view(&o_buf);
        let (mut gq, mut gk, mut gv) = (
            pdq.view_mut(&mut dq),
            pdk.view_mut(&mut dk),
            pdk.view_mut(&mut dv),
        );
        let dov = po.view(&do_buf);
        rt.backward(
            st, &qv, &kv, &vv, &o, &lse, &dov, &mut gq, &mut gk, &mut gv, &p, s,
        )?;
        Ok([
            st.clone_dtoh(&dq)?,
            st.clone_dtoh(&dk)?,
            st.clone_dtoh(&dv)?,
        ])
    };
    let mut errs = [0.0f64; 3];
    let mut problems = Vec::new();
    for det in [false, true].into_iter().take(1 + c.deterministic as usize) {
        let got = run(det)?;
        let tag = if det { "det " } else { "" };
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
    let rt = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"));
    let stream = rt.context().default_stream();
    let start = std::time::Instant::now();
    let (mut failures, mut worst) = (Vec::new(), [[0.0f64; 3]; 2]);
    let all = cases();
    for c in &all {
        let s = c.shape;
        let desc = format!(
            "d={:3} {:4} {:6} b={} sq={:4} sk={:4} h={} hk={} {:10} {}",
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
            }
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
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
