//! Varlen (packed sequences) against the dense batch, forward and backward (atomic), bf16,
//! 16 heads, d64 and d128, causal and not (issue 18's bar):
//!
//! - equal lengths: a packed batch of `b` sequences of `n` tokens against the dense
//!   `[b, n, 16, d]` call on the same data (ratio dense time / varlen time);
//! - uneven lengths (4096, 512, 2048, 127, 3072, 1024, 256, 1 tokens: 8 x 1392): TFLOP/s on the real
//!   work (the sum over sequences of each one's FLOPs, halved when causal, as its
//!   sequence length alone gives them) against the dense kernel's TFLOP/s at the mean
//!   length (batch 8).
//!
//! Each call: 256 MB L2 flush, then a GPU spin of `BENCH_SLEEP_CYCLES` (default 1.5M
//! clock cycles, about 0.75 ms: longer than the backward's host-side enqueue, up to
//! ~0.4 ms on the H200's host; a call that outlasts it counts in the row's `sleep_short`),
//! CUDA events around the call alone (GPU time; the host's enqueue time in `host_ms`:
//! dense fwd, dense bwd, varlen fwd, varlen bwd), 5 warm-ups, median of 15; `BENCH_ROUNDS` (default 3) rounds interleave varlen and dense. Rows: `BENCH_D`
//! (default 64,128), `BENCH_CAUSAL` (0,1), `BENCH_N` (1024,4096 for the equal rows, 0 for
//! the uneven one). JSON lines on stdout (and `BENCH_OUT`).

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::rng::Rng;
use flash_runtime::{BwdInputs, BwdOptions, FlashAttention, Tensor4, Varlen};
use half::bf16;
use serde_json::json;

mod bench_common;
use bench_common::{SpinTimer, attn_params, env_list, median};

const H: usize = 16;

fn dev(s: &Arc<CudaStream>, rng: &mut Rng, n: usize) -> Result<CudaSlice<bf16>, Box<dyn Error>> {
    let x: Vec<bf16> = rng.normal_vec(n).into_iter().map(bf16::from_f32).collect();
    Ok(s.clone_htod(&x)?)
}

/// (forward ms, backward ms) of the dense batch `[b, n, H, d]` and of the same tokens
/// packed with lengths `lens`.
#[allow(clippy::type_complexity)]
fn time_pair(
    rt: &FlashAttention,
    s: &Arc<CudaStream>,
    t: &mut SpinTimer,
    (b, n, d, causal): (usize, usize, usize, bool),
    lens: &[usize],
) -> Result<([f64; 2], [f64; 2]), Box<dyn Error>> {
    let mut rng = Rng::new(7);
    let total = b * n;
    assert_eq!(lens.iter().sum::<usize>(), total);
    let (q, k, v, d_o) = (
        dev(s, &mut rng, total * H * d)?,
        dev(s, &mut rng, total * H * d)?,
        dev(s, &mut rng, total * H * d)?,
        dev(s, &mut rng, total * H * d)?,
    );
    let p = attn_params(causal);
    let opts = BwdOptions::new();
    // dense
    let ds = [b, n, H, d];
    let tt = |x, sh| Tensor4::contiguous(x, sh);
    let (qt, kt, vt, dot) = (tt(&q, ds), tt(&k, ds), tt(&v, ds), tt(&d_o, ds));
    let fwd = rt.forward(s, &qt, &kt, &vt, &p)?;
    let (o, lse) = (fwd.o(), fwd.lse());
    let dense_f = t.ms(s, || Ok(rt.forward(s, &qt, &kt, &vt, &p).map(|_| ())?))?;
    let inputs = BwdInputs {
        q: &qt,
        k: &kt,
        v: &vt,
        o: &o,
        lse: &lse,
        d_o: &dot,
    };
    let dense_b = t.ms(s, || Ok(rt.backward(s, inputs, &p, &opts).map(|_| ())?))?;
    // packed
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().unwrap() + l as i32);
    }
    let cud = s.clone_htod(&cu)?;
    let max = *lens.iter().max().unwrap();
    let vl = Varlen::new(cud.as_view(), cud.as_view(), max, max);
    let ps = [1, total, H, d];
    let (qp, kp, vp, dop) = (tt(&q, ps), tt(&k, ps), tt(&v, ps), tt(&d_o, ps));
    let fv = rt.forward_varlen(s, (&qp, &kp, &vp), &vl, &p)?;
    let (ov, lv) = (fv.o(), fv.lse());
    let var_f = t.ms(s, || {
        Ok(rt.forward_varlen(s, (&qp, &kp, &vp), &vl, &p).map(|_| ())?)
    })?;
    let inputs = BwdInputs {
        q: &qp,
        k: &kp,
        v: &vp,
        o: &ov,
        lse: &lv,
        d_o: &dop,
    };
    let var_b = t.ms(s, || {
        Ok(rt.backward_varlen(s, inputs, &vl, &p, &opts).map(|_| ())?)
    })?;
    Ok(([dense_f, dense_b], [var_f, var_b]))
}

fn flops(lens: &[usize], d: usize, causal: bool) -> f64 {
    let f: f64 = lens.iter().map(|&n| 4.0 * (H * n * n * d) as f64).sum();
    if causal { f / 2.0 } else { f }
}

fn main() -> Result<(), Box<dyn Error>> {
    let rt = FlashAttention::on_device(0)?;
    let s = rt.context().default_stream();
    let rounds = env_list("BENCH_ROUNDS", &[3]).first().copied().unwrap_or(3);
    let cycles = env_list("BENCH_SLEEP_CYCLES", &[1_500_000])
        .first()
        .copied()
        .unwrap_or(1_500_000);
    let mut t = SpinTimer::new(&rt, &s, cycles as u64)?;
    let mut out = match std::env::var("BENCH_OUT") {
        Ok(p) if !p.is_empty() => Some(std::fs::File::create(p)?),
        _ => None,
    };
    let uneven = [4096usize, 512, 2048, 127, 3072, 1024, 256, 1];
    let mean = uneven.iter().sum::<usize>() / uneven.len();
    let mut ratios: Vec<f64> = Vec::new();
    let (ds, causals, ns) = (
        env_list("BENCH_D", &[64, 128]),
        env_list("BENCH_CAUSAL", &[0, 1]),
        env_list("BENCH_N", &[1024, 4096, 0]),
    );
    for d in ds {
        for causal in causals.iter().map(|&c| c != 0) {
            let rows = [("equal", 8, 1024), ("equal", 4, 4096), ("uneven", 8, 0)];
            for (kind, b, n) in rows.into_iter().filter(|r| ns.contains(&r.2)) {
                let mut fwd = Vec::new();
                let mut bwd = Vec::new();
                for _ in 0..rounds {
                    let (vals, dense, var) = if kind == "equal" {
                        let lens = vec![n; b];
                        let (dn, vr) = time_pair(&rt, &s, &mut t, (b, n, d, causal), &lens)?;
                        (lens, dn, vr)
                    } else {
                        // the uneven batch packed, against the dense kernel at the mean
                        let total: usize = uneven.iter().sum();
                        let (_, vr) =
                            time_pair(&rt, &s, &mut t, (8, total / 8, d, causal), &uneven)?;
                        let (dn, _) =
                            time_pair(&rt, &s, &mut t, (8, mean, d, causal), &vec![mean; 8])?;
                        (uneven.to_vec(), dn, vr)
                    };
                    // TFLOP/s ratios: varlen's on its real work over dense's on its own
                    let (fv, fd) = (
                        flops(&vals, d, causal),
                        match kind {
                            "equal" => flops(&vals, d, causal),
                            _ => flops(&vec![mean; 8], d, causal),
                        },
                    );
                    fwd.push((fv / var[0]) / (fd / dense[0]));
                    bwd.push((fv / var[1]) / (fd / dense[1]));
                    let tf = |f: f64, ms: f64| f / ms / 1e9;
                    let host: Vec<f64> = t.host_ms.drain(..).collect();
                    let line = json!({"kind": kind, "d": d, "causal": causal, "b": b, "n": n,
                        "host_ms": host, "sleep_short": std::mem::take(&mut t.sleep_short),
                        "dense_fwd_ms": dense[0], "varlen_fwd_ms": var[0],
                        "dense_bwd_ms": dense[1], "varlen_bwd_ms": var[1],
                        "dense_fwd_tflops": tf(fd, dense[0]), "varlen_fwd_tflops": tf(fv, var[0]),
                        "dense_bwd_tflops": tf(2.5 * fd, dense[1]), "varlen_bwd_tflops": tf(2.5 * fv, var[1])});
                    println!("{line}");
                    if let Some(f) = out.as_mut() {
                        use std::io::Write;
                        writeln!(f, "{line}")?;
                    }
                }
                let (mf, mb) = (median(fwd), median(bwd));
                ratios.push(mf);
                ratios.push(mb);
                let line = json!({"row": true, "kind": kind, "d": d, "causal": causal, "b": b,
                    "n": n, "fwd_ratio_median": mf, "bwd_ratio_median": mb});
                println!("{line}");
                if let Some(f) = out.as_mut() {
                    use std::io::Write;
                    writeln!(f, "{line}")?;
                }
            }
        }
    }
    let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    let worst = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{}",
        json!({"summary": true, "geomean": geo, "worst": worst, "method": t.flush.method(), "spin_cycles": t.sleep.cycles})
    );
    Ok(())
}
