//! The sliding-window forward against our causal forward (issue 19's window rows): bf16,
//! d128, batch 2, 16 heads, sq = sk = 8K and 32K, windows 256, 1024 and 4096 as Mistral
//! runs them (`with_window(w - 1, 0)`: causal within the last w keys).
//!
//! Per row: the median ms (`bench_common::SpinTimer`: 256 MB L2 flush, then a GPU spin of
//! 1.5M cycles past the host's enqueue, CUDA events around the call, 5 warm-ups, median
//! of 15), in
//! `BENCH_ROUNDS` (default 3) rounds that time causal and every window in turn; TFLOP/s
//! on the unmasked work (4 d per visible (query, key) pair) and on the key blocks the
//! kernel visits (its tiles' block_m x block_n per visited block), and each window's
//! ratios to causal. JSON lines on stdout.

use std::error::Error;

use flash_codegen::{DType, KernelSpec, Mask, Pass, Tiling};
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, FlashAttention, Tensor4, Tensor4Mut};
use half::bf16;
use serde_json::json;

mod bench_common;
use bench_common::{SpinTimer, env_list, median};

const H: usize = 16;
const D: usize = 128;
const B: usize = 2;

/// (unmasked pairs, visited blocks' pairs) of one head of an n x n problem under `window`
/// (`None`: causal), for tiles `bm x bn`.
fn work(n: usize, window: Option<usize>, (bm, bn): (usize, usize)) -> (f64, f64) {
    let left = window.map_or(n, |w| w - 1);
    let pairs: usize = (0..n).map(|i| i + 1 - i.saturating_sub(left)).sum();
    let mut visited = 0usize;
    for m0 in (0..n).step_by(bm) {
        let last = (m0 + bm - 1).min(n - 1);
        let first_key = m0.saturating_sub(left);
        let (first, end) = (first_key / bn, last / bn + 1);
        visited += (end - first) * bm * bn;
    }
    (pairs as f64, visited as f64)
}

fn main() -> Result<(), Box<dyn Error>> {
    let rt = FlashAttention::on_device(0)?;
    let s = rt.context().default_stream();
    let rounds = env_list("BENCH_ROUNDS", &[3]).first().copied().unwrap_or(3);
    let mut timer = SpinTimer::new(&rt, &s, 1_500_000)?;
    let mut ratios = Vec::new();
    for n in env_list("BENCH_N", &[8192, 32768]) {
        let mut rng = Rng::new(11);
        let shape = [B, n, H, D];
        let mut dev = |len: usize| -> Result<_, Box<dyn Error>> {
            let x: Vec<bf16> = rng
                .normal_vec(len)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            Ok(s.clone_htod(&x)?)
        };
        let (q, k, v) = (
            dev(B * n * H * D)?,
            dev(B * n * H * D)?,
            dev(B * n * H * D)?,
        );
        let mut o = s.alloc_zeros::<bf16>(B * n * H * D)?;
        let windows: Vec<Option<usize>> = [None, Some(256), Some(1024), Some(4096)].into();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); windows.len()];
        timer.sleep_short = 0;
        for _ in 0..rounds {
            for (wi, w) in windows.iter().enumerate() {
                let p = match w {
                    None => AttnParams::causal(),
                    Some(w) => AttnParams::new().with_window(*w as i32 - 1, 0),
                };
                let (qt, kt, vt) = (
                    Tensor4::contiguous(&q, shape),
                    Tensor4::contiguous(&k, shape),
                    Tensor4::contiguous(&v, shape),
                );
                let ms = timer.ms(&s, || {
                    let mut ot = Tensor4Mut::contiguous(&mut o, shape);
                    Ok(rt.forward_into(&s, &qt, &kt, &vt, &mut ot, None, &p)?)
                })?;
                times[wi].push(ms);
            }
        }
        let mut causal = (0.0, 0.0);
        for (wi, w) in windows.iter().enumerate() {
            let mask = if w.is_some() {
                Mask::Local
            } else {
                Mask::Causal
            };
            let spec = KernelSpec {
                pass: Pass::Fwd,
                head_dim: D as u32,
                dtype: DType::Bf16,
                mask,
                tiling: Tiling::Standard,
                arch: flash_codegen::Arch::Sm80,
            };
            let t = spec.tiles();
            let (pairs, visited) = work(n, *w, (t.block_m() as usize, t.block_n() as usize));
            let ms = median(times[wi].clone());
            let tf = |x: f64| 4.0 * D as f64 * x * (B * H) as f64 / ms / 1e9;
            let (tf_work, tf_visited) = (tf(pairs), tf(visited));
            if w.is_none() {
                causal = (tf_work, tf_visited);
            }
            let line = json!({"n": n, "window": w, "ms": ms, "round_ms": times[wi],
                "tflops_unmasked": tf_work, "tflops_visited": tf_visited,
                "visited_vs_causal": tf_visited / causal.1, "unmasked_vs_causal": tf_work / causal.0,
                "sleep_short": timer.sleep_short});
            if w.is_some() {
                ratios.push((n, *w, tf_visited / causal.1, tf_work / causal.0));
            }
            println!("{line}");
        }
    }
    println!("{}", json!({"summary": true, "ratios": ratios}));
    Ok(())
}
