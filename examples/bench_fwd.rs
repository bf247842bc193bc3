//! Forward-pass benchmark, FlashAttention-2 paper setup: hidden 2048 (heads = 2048 / d),
//! 16384 tokens (batch = 16384 / seqlen), d in {64, 128, 256}, causal and not, seqlen
//! 512..16K, bf16 and f16. Each row: 5 warm-ups, then the median of >= 20 launches timed
//! with CUDA events, each after do_bench's 256 MB L2 flush (`bench_common::Flush`);
//! TFLOP/s from 4 * b * h * n^2 * d (half if causal).
//!
//! Env: BENCH_OUT (JSON path, default bench_fwd.json), BENCH_D, BENCH_SEQ (comma lists),
//! BENCH_DTYPE (bf16,f16), BENCH_CAUSAL (0,1), BENCH_ITERS (default 20), BENCH_FLUSH=0,
//! BENCH_GROUP (query heads per KV head, default 1: GQA rows, k and v with heads / group
//! heads),
//! BENCH_PATH (sm80, the default: `forward_into` forced to the sm_80 kernels; auto:
//! `forward_into`'s own choice, sm_90a on Hopper where it applies; sm90: the sm_90a forward,
//! `launch_fwd_sm90`, d64/d128 on compute capability 9.0; sm90ovl: its intra-warpgroup
//! overlapped schedule; sm90pp: overlapped, the consumers issuing in turn; sm90pers: that
//! on a persistent grid, sm90dyn: its tiles claimed from a counter, sm90chain: that with
//! the tile edges chained, sm90tst: sm90dyn with the epilogue through TMA (the shipping
//! kernels, what auto runs on Hopper), sm90ctst: sm90chain with the epilogue through TMA,
//! sm90qa: sm90tst with each next tile's Q loaded early; recorded as `path`), BENCH_SM90_WGS (2 or 3: the sm90 kernel's consumer warpgroups),
//! BENCH_WINDOW=w (a sliding window as Mistral runs it, query i seeing keys i - w + 1 ..= i:
//! window (w - 1, 0) in place of the mask, `causal` 0; TFLOP/s on the pairs it sees),
//! BENCH_SOFTCAP=cap (a logit softcap), BENCH_FMA_EXP2=k (sm90 paths: k of every 4
//! n-tiles' probabilities on the FMA pipe, `fwd::Variant::fma_exp2`; default the kernel's),
//! BENCH_EDGE_MASKS=1 (sm90 paths with BENCH_WINDOW: one mask pass per window edge
//! crossed, `fwd::Variant::edge_masks`), BENCH_FIXED_REF=1 (sm90 paths with BENCH_SOFTCAP,
//! bf16: the softmax on one fixed reference, `fwd::Variant::fixed_ref`), BENCH_SM90_PP=0
//! (sm90 paths: the consumers issue their products without taking turns,
//! `fwd::Variant::pingpong` off).
//! Run: `cargo run --release --features gpu --example bench_fwd`.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::rng::Rng;
use flash_runtime::{Element, FlashAttention, ForwardArch, Sm90FwdShape, Tensor4, Tensor4Mut};

mod bench_common;
mod bench_fwd_env;
use bench_common::{Flush, HIDDEN, Sweep, TOKENS, WARMUP, attn_params, median};
use bench_fwd_env::{
    edge_masks, fixed_ref, fma_exp2, group, sm90, sm90_chained, sm90_consumers, sm90_dynamic,
    sm90_overlap, sm90_persistent, sm90_pingpong, sm90_q_ahead, sm90_tma_store, softcap, window,
};

#[derive(Debug)]
struct Row {
    dtype: &'static str,
    d: usize,
    causal: bool,
    n: usize,
    b: usize,
    h: usize,
    hk: usize,
    ms_median: f64,
    ms_min: f64,
    tflops: f64,
    /// The kernel that ran (the entry `forward_into` chose, or the sm90 path's label).
    kernel: String,
    error: Option<String>,
}

impl Row {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": "flash_ptx", "dtype": self.dtype, "d": self.d, "causal": self.causal,
            "n": self.n, "b": self.b, "h": self.h, "hk": self.hk, "fwd_ms": self.ms_median,
            "fwd_ms_min": self.ms_min, "fwd_tflops": self.tflops, "error": self.error,
            "kernel": self.kernel,
            "path": std::env::var("BENCH_PATH").unwrap_or_else(|_| "sm80".into()),
            "sm90_wgs": sm90_consumers(),
            "window": window(),
            "softcap": softcap(),
            "fma_exp2": fma_exp2(),
        })
    }
}

/// Inputs for one dtype: flat buffers of TOKENS * HIDDEN elements, reshaped per row.
struct Bufs<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    o: CudaSlice<T>,
    nan: CudaSlice<T>,
    lse: CudaSlice<f32>,
}

fn bufs<T: Element>(stream: &Arc<CudaStream>, seed: u64) -> Result<Bufs<T>, Box<dyn Error>> {
    let n = TOKENS * HIDDEN;
    let mut rng = Rng::new(seed);
    let mut rand = || -> Vec<T> { (0..n).map(|_| T::from_f32(rng.normal())).collect() };
    let (q, k, v) = (rand(), rand(), rand());
    Ok(Bufs {
        q: stream.clone_htod(&q)?,
        k: stream.clone_htod(&k)?,
        v: stream.clone_htod(&v)?,
        o: stream.alloc_zeros(n)?,
        nan: stream.clone_htod(&vec![T::from_f32(f32::NAN); n])?,
        lse: stream.alloc_zeros(TOKENS * (HIDDEN / 8))?,
    })
}

#[allow(clippy::too_many_arguments)]
fn time_row<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    bu: &mut Bufs<T>,
    d: usize,
    n: usize,
    causal: bool,
    iters: usize,
    flush: &mut Flush,
) -> Result<(f64, f64, String), Box<dyn Error>> {
    let (b, h) = (TOKENS / n, HIDDEN / d);
    let hk = h / group();
    let causal = causal && window().is_none(); // (a window replaces the mask)
    let (shape, kv_shape) = ([b, n, h, d], [b, n, hk, d]);
    stream.memcpy_dtod(&bu.nan, &mut bu.o)?; // poison: every launch must overwrite o
    let params = match window() {
        Some(w) => attn_params(false).with_window(w as i32 - 1, 0),
        None => attn_params(causal),
    };
    let params = match softcap() {
        Some(cap) => params.with_softcap(cap),
        None => params,
    };
    let (q, k, v) = (
        Tensor4::contiguous(&bu.q, shape),
        Tensor4::contiguous(&bu.k, kv_shape),
        Tensor4::contiguous(&bu.v, kv_shape),
    );
    let ctx = rt.context();
    let (start, end) = (
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
    );
    let mut times = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        flush.run(stream)?;
        start.record(stream)?;
        // preallocated outputs: no allocation inside the events
        if sm90() {
            let sh = Sm90FwdShape {
                batch: b,
                seqlen_q: n,
                seqlen_k: n,
                heads: h,
                heads_k: hk,
                head_dim: d,
                causal,
                window: window().map(|w| (w as u32 - 1, 0)),
                scores: match softcap() {
                    Some(_) => flash_codegen::Scores::Softcap,
                    None => flash_codegen::Scores::Plain,
                },
                fma_exp2: fma_exp2(),
                overlap: sm90_overlap(),
                pingpong: sm90_pingpong(),
                consumers: sm90_consumers(),
                persistent: sm90_persistent(),
                dynamic: sm90_dynamic(),
                chained: sm90_chained(),
                tma_store: sm90_tma_store(),
                q_ahead: sm90_q_ahead(),
                fixed_ref: fixed_ref(),
                edge_masks: window().is_some() && edge_masks(),
                debug: false,
            };
            rt.launch_fwd_sm90_scored(
                stream,
                sh,
                (&bu.q, &bu.k, &bu.v),
                &mut bu.o,
                Some(&mut bu.lse),
                (softcap(), None),
            )?;
        } else {
            let mut o = Tensor4Mut::contiguous(&mut bu.o, shape);
            rt.forward_into(
                stream,
                &q,
                &k,
                &v,
                &mut o,
                Some(bu.lse.as_view_mut()),
                &params,
            )?;
        }
        end.record(stream)?;
        let ms = start.elapsed_ms(&end)? as f64;
        if i >= WARMUP {
            times.push(ms);
        }
    }
    let out: Vec<T> = stream.clone_dtoh(&bu.o)?;
    let bad = out.iter().filter(|x| !x.to_f32().is_finite()).count();
    if bad > 0 {
        return Err(format!(
            "{bad} of {} outputs not finite (kernel wrong or not writing)",
            out.len()
        )
        .into());
    }
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let kernel = if sm90() {
        std::env::var("BENCH_PATH").unwrap_or_default()
    } else {
        rt.forward_kernel_name(stream, &q, &k, &v, &params)?
            .unwrap_or_default()
    };
    Ok((median(times), min, kernel))
}

fn sweep<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    sw: &Sweep,
    rows: &mut Vec<Row>,
    flush: &mut Flush,
) -> Result<(), Box<dyn Error>> {
    let mut bu = bufs::<T>(stream, 0xbe4c ^ T::DTYPE as u64)?;
    for &d in &sw.dims {
        for &causal in &sw.causal {
            for &n in &sw.seqs {
                let (b, h) = (TOKENS / n.max(1), HIDDEN / d.max(1));
                let flops = match window() {
                    // the pairs a window of w sees: sum over queries i of min(i + 1, w)
                    Some(w) => {
                        let w = w.min(n);
                        let pairs = w * (w + 1) / 2 + (n - w) * w;
                        4.0 * (b * h * d * pairs) as f64
                    }
                    None => 4.0 * (b * h * n * n * d) as f64 / if causal { 2.0 } else { 1.0 },
                };
                let mut row = Row {
                    dtype: T::DTYPE.name(),
                    d,
                    causal,
                    n,
                    b,
                    h,
                    hk: h / group(),
                    ms_median: f64::NAN,
                    ms_min: f64::NAN,
                    tflops: f64::NAN,
                    kernel: String::new(),
                    error: None,
                };
                if n == 0 || d == 0 || TOKENS % n != 0 || HIDDEN % d != 0 || h % group() != 0 {
                    row.error =
                        Some("seqlen must divide 16384, d 2048 and BENCH_GROUP the heads".into());
                } else {
                    match time_row(rt, stream, &mut bu, d, n, causal, sw.iters, flush) {
                        Ok((med, min, kernel)) => {
                            (row.ms_median, row.ms_min, row.kernel) = (med, min, kernel);
                            row.tflops = flops / med / 1e9;
                        }
                        Err(e) => row.error = Some(e.to_string()),
                    }
                }
                println!(
                    "{:5} {:4} {:6} {:6} {:4} {:4} {:10.4} {:10.4} {:9.1}  {} {}",
                    row.dtype,
                    d,
                    causal as u8,
                    n,
                    b,
                    h,
                    row.ms_median,
                    row.ms_min,
                    row.tflops,
                    row.kernel,
                    row.error.as_deref().unwrap_or("")
                );
                rows.push(row);
            }
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_fwd: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut rt = FlashAttention::on_device(0)?;
    // BENCH_PATH unset or sm80: the sm_80 kernels even on Hopper; auto: forward_into's
    // own choice (sm_90a on compute capability 9.0 where it applies)
    match std::env::var("BENCH_PATH").as_deref() {
        Ok("auto") => {}
        Ok(p) if p.starts_with("sm90") => {}
        _ => rt.set_forward_arch(ForwardArch::Sm80),
    }
    let stream = rt.context().default_stream();
    let ctx = rt.context();
    let gpu = ctx.name()?;
    let sw = Sweep::from_env();
    let dtypes = std::env::var("BENCH_DTYPE").unwrap_or_else(|_| "bf16,f16".into());
    let mut flush = Flush::from_env(&stream)?;
    println!(
        "flash-ptx forward on {gpu}: {TOKENS} tokens, hidden {HIDDEN}, median of {} launches; {}",
        sw.iters,
        flush.method()
    );
    println!(
        "{:5} {:>4} {:>6} {:>6} {:>4} {:>4} {:>10} {:>10} {:>9}",
        "dtype", "d", "causal", "n", "b", "h", "ms", "ms_min", "TFLOP/s"
    );
    let mut rows = Vec::new();
    for dt in dtypes.split(',').map(str::trim) {
        match dt {
            "bf16" => sweep::<half::bf16>(&rt, &stream, &sw, &mut rows, &mut flush)?,
            "f16" => sweep::<half::f16>(&rt, &stream, &sw, &mut rows, &mut flush)?,
            other => eprintln!("skipping unknown dtype `{other}` (use bf16, f16)"),
        }
    }
    let (maj, min) = ctx.compute_capability()?;
    let report = serde_json::json!({
        "gpu": gpu, "compute_capability": format!("{maj}.{min}"),
        "tokens": TOKENS, "hidden": HIDDEN, "warmup": WARMUP, "iters": sw.iters,
        "timing": flush.method(),
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    let path = std::env::var("BENCH_OUT").unwrap_or_else(|_| "bench_fwd.json".into());
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {path}");
    Ok(())
}
