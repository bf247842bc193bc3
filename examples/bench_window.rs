//! The modifier forwards against our plain ones (issue 19's rows): bf16, d128, batch 2, 16
//! heads, sq = sk = 8K and 32K; windows 256, 1024, 2048 and 4096 as Mistral runs them
//! (`with_window(w - 1, 0)`: causal within the last w keys) against causal; softcap 30,
//! causal and unmasked, against the causal and the unmasked kernels; ALiBi (BLOOM's
//! slopes for 16 heads, `[heads]`), causal and unmasked, against the same.
//! `BENCH_ROWS=causal,causal_alibi,..` times only the rows named (twins included by hand).
//!
//! Per row: the median ms (`bench_common::SpinTimer`: 256 MB L2 flush, then a GPU spin of
//! 1.5M cycles past the host's enqueue, CUDA events around the call, 5 warm-ups, median
//! of 15), in
//! `BENCH_ROUNDS` (default 3) rounds that time causal and every window in turn; TFLOP/s
//! on the unmasked work (4 d per visible (query, key) pair) and on the key blocks the
//! kernel visits (its tiles' block_m x block_n per visited block), and each row's ratios
//! to its plain twin (`twin_ms_over_ms`: above 0.909 is a cost under 10%). JSON lines on
//! stdout.
//!
//! `BENCH_PASS=bwd` times the backward instead (`backward_into`, atomic mode, scratch and
//! gradients preallocated, o and lse from the row's own forward) on the same rows,
//! TFLOP/s at 2.5 times the forward's work (FA2's count:
//! 10 d per pair), the visited blocks counted per key block (query blocks its window
//! reaches). `BENCH_BWD_TILING=standard|long|...` runs every backward row on that tile row
//! (`BwdOptions::tiling`); unset or `auto`, the runtime's rule (the long row from 8K
//! query rows, for windows reaching 4096 keys or more: `validate::rule_rows`).

use std::error::Error;

use cudarc::driver::CudaSlice;
use flash_codegen::{DType, KernelSpec, Mask, Pass, Scores, Tiling};
use flash_runtime::rng::Rng;
use flash_runtime::validate::rule_rows;
use flash_runtime::{
    Alibi, AttnParams, BwdInputs, BwdOptions, BwdScratch, FlashAttention, GradsMut, Tensor4,
    Tensor4Mut,
};
use half::bf16;
use serde_json::json;

mod bench_common;
use bench_common::{SpinTimer, env_list, median, tiling_env};

const H: usize = 16;
const D: usize = 128;
const B: usize = 2;

/// One bench row: its label, whether it is causal, its window (causal within the last w
/// keys), its softcap, and the label of its plain twin (none for a plain row).
struct Row {
    label: String,
    causal: bool,
    window: Option<usize>,
    softcap: Option<f32>,
    alibi: bool,
    twin: Option<&'static str>,
}

impl Row {
    /// The row's parameters (ALiBi: `slopes`, f32 `[heads]`).
    fn params<'a>(&self, slopes: &'a CudaSlice<f32>) -> AttnParams<'a> {
        let p = match (self.window, self.causal) {
            (Some(w), _) => AttnParams::new().with_window(w as i32 - 1, 0),
            (None, true) => AttnParams::causal(),
            (None, false) => AttnParams::new(),
        };
        let p = match self.softcap {
            Some(c) => p.with_softcap(c),
            None => p,
        };
        match self.alibi {
            true => p.with_alibi(Alibi::per_head(slopes)),
            false => p,
        }
    }

    fn spec(&self) -> KernelSpec {
        KernelSpec {
            pass: Pass::Fwd,
            head_dim: D as u32,
            dtype: DType::Bf16,
            mask: match (self.window, self.causal) {
                (Some(_), _) => Mask::Local,
                (None, c) => Mask::causal(c),
            },
            scores: match (self.softcap, self.alibi) {
                (Some(_), _) => Scores::Softcap,
                (None, true) => Scores::Alibi,
                (None, false) => Scores::Plain,
            },
            tiling: Tiling::Standard,
            arch: flash_codegen::Arch::Sm80,
        }
    }
}

fn rows() -> Vec<Row> {
    let row = |label: &str, causal, window, softcap, twin| Row {
        label: label.to_string(),
        causal,
        window,
        softcap,
        alibi: label.ends_with("alibi"),
        twin,
    };
    let only = std::env::var("BENCH_ROWS").ok();
    let only: Option<Vec<String>> = only.map(|s| s.split(',').map(str::to_string).collect());
    let all = vec![
        row("causal", true, None, None, None),
        row("window256", true, Some(256), None, Some("causal")),
        row("window1024", true, Some(1024), None, Some("causal")),
        row("window2048", true, Some(2048), None, Some("causal")),
        row("window4096", true, Some(4096), None, Some("causal")),
        row("causal_softcap30", true, None, Some(30.0), Some("causal")),
        row("plain", false, None, None, None),
        row("plain_softcap30", false, None, Some(30.0), Some("plain")),
        row("causal_alibi", true, None, None, Some("causal")),
        row("plain_alibi", false, None, None, Some("plain")),
    ];
    match only {
        Some(names) => all
            .into_iter()
            .filter(|r| names.contains(&r.label))
            .collect(),
        None => all,
    }
}

/// The query rows per CTA of an sm_90a forward named `name` (`..._m{rows}_...`), `None` for
/// another kernel.
fn sm90_block_m(name: &str) -> Option<usize> {
    if !name.starts_with("fa3_") {
        return None;
    }
    name.split('_')
        .find_map(|p| p.strip_prefix('m')?.parse().ok())
}

/// (unmasked pairs, visited blocks' pairs) of one head of an n x n problem under `window`
/// (`None`: causal; `causal` false: every pair), for tiles `bm x bn`.
fn work(n: usize, causal: bool, window: Option<usize>, (bm, bn): (usize, usize)) -> (f64, f64) {
    if !causal {
        let pairs = (n * n) as f64;
        return (pairs, (n.div_ceil(bm) * n.div_ceil(bn) * bm * bn) as f64);
    }
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

/// [`work`] for the backward main pass: per key block, the query blocks its window
/// reaches (queries `n0 ..= n0 + bn - 1 + left`, causal: to the end).
fn work_bwd(n: usize, window: Option<usize>, (bm, bn): (usize, usize)) -> f64 {
    let left = window.map_or(n, |w| w - 1);
    let mut visited = 0usize;
    for n0 in (0..n).step_by(bn) {
        let last_q = (n0 + bn - 1 + left).min(n - 1);
        visited += (last_q / bm + 1 - n0 / bm) * bm * bn;
    }
    visited as f64
}

fn main() -> Result<(), Box<dyn Error>> {
    let rt = FlashAttention::on_device(0)?;
    let bwd = std::env::var("BENCH_PASS").is_ok_and(|p| p == "bwd");
    let tiling = tiling_env("BENCH_BWD_TILING")?;
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
        let d_o = dev(B * n * H * D)?;
        let mut lse = s.alloc_zeros::<f32>(B * H * n)?;
        let mut grads = [
            dev(B * n * H * D)?,
            dev(B * n * H * D)?,
            dev(B * n * H * D)?,
        ];
        let mut scratch = BwdScratch::new(&s, shape, false)?;
        // BLOOM's slopes for H heads: 2^(-8 (i + 1) / H)
        let slopes: Vec<f32> = (0..H)
            .map(|i| (-8.0 * (i as f32 + 1.0) / H as f32).exp2())
            .collect();
        let slopes = s.clone_htod(&slopes)?;
        let rows = rows();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
        timer.sleep_short = 0;
        for _ in 0..rounds {
            for (wi, row) in rows.iter().enumerate() {
                let p = row.params(&slopes);
                let (qt, kt, vt) = (
                    Tensor4::contiguous(&q, shape),
                    Tensor4::contiguous(&k, shape),
                    Tensor4::contiguous(&v, shape),
                );
                let ms = match bwd {
                    false => timer.ms(&s, || {
                        let mut ot = Tensor4Mut::contiguous(&mut o, shape);
                        Ok(rt.forward_into(&s, &qt, &kt, &vt, &mut ot, None, &p)?)
                    })?,
                    true => {
                        let mut ot = Tensor4Mut::contiguous(&mut o, shape);
                        let l = Some(lse.as_view_mut());
                        rt.forward_into(&s, &qt, &kt, &vt, &mut ot, l, &p)?;
                        let (ot, dot) = (
                            Tensor4::contiguous(&o, shape),
                            Tensor4::contiguous(&d_o, shape),
                        );
                        let lv = lse.as_view();
                        let inputs = BwdInputs {
                            q: &qt,
                            k: &kt,
                            v: &vt,
                            o: &ot,
                            lse: &lv,
                            d_o: &dot,
                        };
                        let [dq, dk, dv] = &mut grads;
                        let mut opts = BwdOptions::new();
                        opts.tiling = tiling;
                        timer.ms(&s, || {
                            let g = GradsMut {
                                dq: &mut Tensor4Mut::contiguous(&mut *dq, shape),
                                dk: &mut Tensor4Mut::contiguous(&mut *dk, shape),
                                dv: &mut Tensor4Mut::contiguous(&mut *dv, shape),
                            };
                            Ok(rt.backward_into(&s, inputs, g, &p, &opts, Some(&mut scratch))?)
                        })?
                    }
                };
                times[wi].push(ms);
            }
        }
        let mut plain = std::collections::HashMap::new();
        for (wi, row) in rows.iter().enumerate() {
            // (the backward: the row it runs, forced or the runtime's rule in atomic mode)
            let spec = match bwd {
                true => {
                    let spec = KernelSpec {
                        pass: Pass::Bwd,
                        ..row.spec()
                    };
                    let window = row.window.map(|w| (w as u32 - 1, 0));
                    match tiling {
                        Some(t) => spec.with_tiling(t),
                        None => spec.for_seqlen(rule_rows(n, window), true),
                    }
                }
                false => row.spec(),
            };
            // the kernel the forward runs (`forward_into`'s choice: the sm_90a one on
            // H100/H200) and its tiles, for the visited blocks
            let name = match bwd {
                true => spec.name(),
                false => {
                    let view = |x| Tensor4::contiguous(x, shape);
                    let p = row.params(&slopes);
                    let chosen = rt.forward_kernel_name(&s, &view(&q), &view(&k), &view(&v), &p)?;
                    chosen.unwrap_or_else(|| spec.name())
                }
            };
            let t = spec.tiles();
            let tiles = match sm90_block_m(&name) {
                Some(bm) => (bm, flash_codegen::kernels::sm90::fwd::BLOCK_N as usize),
                None => (t.block_m() as usize, t.block_n() as usize),
            };
            let (pairs, visited) = work(n, row.causal, row.window, tiles);
            let visited = if bwd && row.causal {
                work_bwd(n, row.window, tiles)
            } else {
                visited
            };
            let ms = median(times[wi].clone());
            let per_pair = if bwd { 10.0 } else { 4.0 };
            let tf = |x: f64| per_pair * D as f64 * x * (B * H) as f64 / ms / 1e9;
            let (tf_work, tf_visited) = (tf(pairs), tf(visited));
            let mut line = json!({"n": n, "pass": if bwd { "bwd" } else { "fwd" },
                "row": row.label, "window": row.window,
                "softcap": row.softcap, "alibi": row.alibi, "kernel": name, "ms": ms,
                "round_ms": times[wi], "tflops_unmasked": tf_work,
                "tflops_visited": tf_visited, "sleep_short": timer.sleep_short});
            match row.twin.and_then(|t| plain.get(t)) {
                Some(&(t_ms, t_work, t_visited)) => {
                    let r = (t_ms / ms, tf_visited / t_visited, tf_work / t_work);
                    line["twin"] = json!(row.twin);
                    line["twin_ms_over_ms"] = json!(r.0);
                    line["visited_vs_twin"] = json!(r.1);
                    line["unmasked_vs_twin"] = json!(r.2);
                    ratios.push(json!([n, row.label, r.0, r.1, r.2]));
                }
                None => {
                    plain.insert(row.label.as_str(), (ms, tf_work, tf_visited));
                }
            }
            println!("{line}");
        }
    }
    println!("{}", json!({"summary": true, "ratios": ratios}));
    Ok(())
}
