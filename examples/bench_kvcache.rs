//! KV-cache (decode / chunked prefill) benchmark of the public call
//! `FlashAttention::forward_kvcache_into`: preallocated o and lse, the split pass and the
//! combine pass together, the call's split-KV scratch allocation included (the call
//! allocates it, stream-ordered, every time). The rows are exactly those of
//! `scripts/bench_kvcache.py` (the peers' side): decode rows batch {1, 8, 64} x cache
//! {4096, 32768, 131072} x queries {1, 4, 16} x (heads, heads_k) {(32, 8), (8, 1)} x
//! d {128, 64}, minus those with b * L * hk * d * 4 > 40e9 bytes of K/V (none: the
//! largest, b64 x 131072 x hk8 x d128, holds 34.4e9), then the chunked-prefill rows
//! (512 queries, h = hk = 8, d 128, cache 8K..128K); `QUICK=1` takes the script's
//! `--quick` list. bf16, non-causal, every sequence full (seqlens_k = None), caches
//! contiguous `[b, L, hk, d]`.
//!
//! Timing as the script's: 3 warm-ups, then the median of 20 calls (10 where the K/V
//! cache exceeds 2e9 bytes), each after do_bench's 256 MB L2 flush (`bench_common::Flush`)
//! and a GPU spin of 200 000 clock cycles (what `torch.cuda._sleep(200_000)` does, here a
//! hand-written PTX kernel loaded with `FlashAttention::load_entry`: the project has no
//! sleep kernel), CUDA events around the call alone. The spin keeps the GPU busy while
//! the host enqueues the call, so only GPU time counts; a call whose enqueue outlasted
//! the spin is counted in the row's `sleep_short` (raise `BENCH_SLEEP_CYCLES` then).
//!
//! One JSON object per line on stdout (diagnostics on stderr): first a dense-forward row
//! (`forward_into`, b 2, sq = sk = 8192, h 16, d 128, non-causal: the chunked-prefill
//! bar's reference, `tflops` from 4 * b * h * sq * sk * d), then a row per case with
//! kind, b, L, sq, h, hk, d, `ours_us` (median, microseconds), `splits` (what the
//! runtime's planner, `validate::plan_kvcache`, picks for the row on this GPU),
//! `kv_bytes` (b * L * hk * d * 2 * 2), `gbs` (kv_bytes / time), `tflops`
//! (4 * b * h * sq * L * d / time; prefill rows add `vs_dense`, their TFLOP/s over the
//! dense row's), `reps`, `sleep_short`. A row that fails has `error` instead; the run
//! then exits with status 1. Every row's o must be finite, and two of its rows (the
//! first and the last (batch, query, head)) must match a float64 reference computed on
//! the host (o rel-L2 <= 1e-2, lse within 1e-3).
//!
//! GPU memory: the largest row (b64, L 131072, hk 8, d 128) holds 2 x 17.2e9 bytes of
//! K/V plus 8.4 MB each of q and o (its split rule picks 1 split: no scratch), the flush
//! 256 MB and the fill chunks 32 MB: about 34.7e9 bytes (32.3 GiB) in all, one row at a
//! time (each row frees its buffers).
//!
//! `MODS=1` runs the modifier sweep instead (`mod_rows`: decode with a softcap, a 4096-key
//! window and both, beside the plain rows; each row adds `visited_gbs`, the K/V bytes its
//! window reaches over its time).
//!
//! Env: QUICK=1, MODS=1, BENCH_OUT (also write the JSON lines to this file),
//! BENCH_FLUSH=0 (no L2 flush), BENCH_SLEEP_CYCLES (default 200000; 0: no spin).
//! Run: `cargo run --release --features gpu --example bench_kvcache`.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::{FlashAttention, KvOptions, Tensor4, Tensor4Mut};
use half::bf16;
use serde_json::{Value, json};

mod bench_common;
use bench_common::{Flush, Sleep, attn_params, env_flag, env_list};
#[path = "bench_kvcache/rows.rs"]
mod rows;
#[path = "bench_kvcache/support.rs"]
mod support;
use rows::{mod_rows, rows};
use support::{Fill, Out, Timer, check_row, tiled};

/// `torch.cuda._sleep(200_000)`: the script's spin before each timed call.
const SLEEP_CYCLES: u64 = 200_000;
/// The dense forward reference row: b, sq = sk, h, d.
const DENSE: (usize, usize, usize, usize) = (2, 8192, 16, 128);

/// One row of `scripts/bench_kvcache.py` (or of the `MODS=1` sweep).
#[derive(Clone, Copy, Debug)]
struct Row {
    kind: &'static str,
    b: usize,
    l: usize,
    sq: usize,
    h: usize,
    hk: usize,
    d: usize,
    /// A sliding window `(left, 0)`: its `left`, or -1 for none.
    left: i32,
    /// A softcap, or 0 for none.
    softcap: f32,
    /// ALiBi with BLOOM's slopes for `h` heads (`[heads]`).
    alibi: bool,
}

impl Row {
    /// K and V bytes (bf16).
    fn kv_bytes(&self) -> usize {
        self.b * self.l * self.hk * self.d * 2 * 2
    }

    fn flops(&self) -> f64 {
        4.0 * (self.b * self.h * self.sq) as f64 * (self.l * self.d) as f64
    }

    /// K and V bytes the row's window reaches (all of them without one).
    fn visited_bytes(&self) -> usize {
        let keys = match self.left {
            -1 => self.l,
            left => self.l.min(left as usize + self.sq),
        };
        self.b * keys * self.hk * self.d * 2 * 2
    }

    /// The row's parameters; ALiBi's `slopes` (f32 `[h]`) where the row has it.
    fn params<'a>(&self, slopes: &'a CudaSlice<f32>) -> flash_runtime::AttnParams<'a> {
        let mut p = attn_params(false);
        if self.left >= 0 {
            p = p.with_window(self.left, 0);
        }
        if self.softcap > 0.0 {
            p = p.with_softcap(self.softcap);
        }
        match self.alibi {
            true => p.with_alibi(flash_runtime::Alibi::per_head(slopes)),
            false => p,
        }
    }

    fn keys(&self) -> Value {
        json!({
            "kind": self.kind, "b": self.b, "L": self.l, "sq": self.sq,
            "h": self.h, "hk": self.hk, "d": self.d, "left": self.left,
            "softcap": self.softcap, "alibi": self.alibi,
        })
    }
}

fn run_row(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    timer: &mut Timer,
    fill: &Fill,
    r: &Row,
) -> Result<Value, Box<dyn Error>> {
    let (qs, ks) = ([r.b, r.sq, r.h, r.d], [r.b, r.l, r.hk, r.d]);
    let (n_q, n_kv, n_lse) = (
        r.b * r.sq * r.h * r.d,
        r.b * r.l * r.hk * r.d,
        r.b * r.h * r.sq,
    );
    // BLOOM's slopes for h heads: 2^(-8 (i + 1) / h)
    let slopes: Vec<f32> = (0..r.h)
        .map(|i| (-8.0 * (i as f32 + 1.0) / r.h as f32).exp2())
        .collect();
    let slopes = stream.clone_htod(&slopes)?;
    let params = r.params(&slopes);
    let opts = KvOptions::new();
    let splits = rt.kvcache_splits::<bf16>(qs, ks, &params, &opts)?;
    stream.synchronize()?; // the pool gives the last row's freed buffers back
    let (free, _) = rt.context().mem_get_info()?;
    let need = 2 * n_kv * 2 + 2 * n_q * 2 + n_lse * 4;
    if need > free {
        return Err(format!(
            "needs {:.1} GiB of GPU memory, {:.1} GiB free",
            need as f64 / (1u64 << 30) as f64,
            free as f64 / (1u64 << 30) as f64
        )
        .into());
    }
    let q_d = stream.clone_htod(&fill.q_host[..n_q])?;
    let k_d = tiled(stream, &fill.k, n_kv)?;
    let v_d = tiled(stream, &fill.v, n_kv)?;
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; n_q])?; // every call must write o
    let mut lse_d = stream.clone_htod(&vec![f32::NAN; n_lse])?;
    let reps = if r.kv_bytes() as f64 > 2e9 { 10 } else { 20 };
    let t = {
        let (q, k, v) = (
            Tensor4::contiguous(&q_d, qs),
            Tensor4::contiguous(&k_d, ks),
            Tensor4::contiguous(&v_d, ks),
        );
        let mut o = Tensor4Mut::contiguous(&mut o_d, qs);
        timer.time(stream, reps, || {
            let lse = Some(lse_d.as_view_mut());
            rt.forward_kvcache_into(stream, &q, &k, &v, None, &mut o, lse, &params, &opts)?;
            Ok(())
        })?
    };
    let o_host: Vec<bf16> = stream.clone_dtoh(&o_d)?;
    let lse_host: Vec<f32> = stream.clone_dtoh(&lse_d)?;
    check_row(fill, r, &o_host, &lse_host)?;
    let us = t.median_us;
    let mut j = r.keys();
    let m = j.as_object_mut().ok_or("row keys are an object")?;
    m.insert("ours_us".into(), json!(us));
    m.insert("splits".into(), json!(splits));
    m.insert("kv_bytes".into(), json!(r.kv_bytes()));
    m.insert("gbs".into(), json!(r.kv_bytes() as f64 / us / 1e3));
    m.insert(
        "visited_gbs".into(),
        json!(r.visited_bytes() as f64 / us / 1e3),
    );
    m.insert("tflops".into(), json!(r.flops() / us / 1e6));
    m.insert("reps".into(), json!(reps));
    m.insert("sleep_short".into(), json!(t.sleep_short));
    Ok(j)
}

/// The dense forward reference: `forward_into` on b 2, sq = sk = 8192, h 16, d 128, bf16,
/// non-causal, timed as the rows are.
fn dense_row(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    timer: &mut Timer,
    fill: &Fill,
) -> Result<Value, Box<dyn Error>> {
    let (b, s, h, d) = DENSE;
    let shape = [b, s, h, d];
    let n = b * s * h * d;
    let (q_d, k_d, v_d) = (
        tiled(stream, &fill.v, n)?,
        tiled(stream, &fill.k, n)?,
        tiled(stream, &fill.v, n)?,
    );
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; n])?;
    let mut lse_d = stream.alloc_zeros::<f32>(b * h * s)?;
    let params = attn_params(false);
    let reps = 20;
    let t = {
        let (q, k, v) = (
            Tensor4::contiguous(&q_d, shape),
            Tensor4::contiguous(&k_d, shape),
            Tensor4::contiguous(&v_d, shape),
        );
        let mut o = Tensor4Mut::contiguous(&mut o_d, shape);
        timer.time(stream, reps, || {
            let lse = Some(lse_d.as_view_mut());
            rt.forward_into(stream, &q, &k, &v, &mut o, lse, &params)?;
            Ok(())
        })?
    };
    let o_host: Vec<bf16> = stream.clone_dtoh(&o_d)?;
    let bad = o_host.iter().filter(|x| !x.to_f32().is_finite()).count();
    if bad > 0 {
        return Err(format!("dense forward: {bad} of {n} outputs not finite").into());
    }
    let flops = 4.0 * (b * h * s) as f64 * (s * d) as f64;
    let us = t.median_us;
    Ok(json!({
        "kind": "dense", "b": b, "L": s, "sq": s, "h": h, "hk": h, "d": d,
        "ours_us": us, "tflops": flops / us / 1e6, "reps": reps,
        "sleep_short": t.sleep_short,
    }))
}

fn main() {
    match run() {
        Ok(0) => {}
        Ok(failed) => {
            eprintln!("bench_kvcache: {failed} rows failed");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("bench_kvcache: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs every row; the number that failed.
fn run() -> Result<usize, Box<dyn Error>> {
    let rt = FlashAttention::on_device(0)?;
    let stream = rt.context().default_stream();
    let ctx = rt.context();
    let quick = env_flag("QUICK");
    let rows = match env_flag("MODS") {
        true => mod_rows(),
        false => rows(quick),
    };
    let cycles = env_list("BENCH_SLEEP_CYCLES", &[SLEEP_CYCLES as usize])
        .first()
        .map_or(SLEEP_CYCLES, |&c| c as u64);
    let mut out = Out(match std::env::var("BENCH_OUT") {
        Ok(p) if !p.is_empty() => Some(std::fs::File::create(&p)?),
        _ => None,
    });
    let q_max = rows
        .iter()
        .map(|r| r.b * r.sq * r.h * r.d)
        .max()
        .unwrap_or(0);
    let fill = Fill::new(&stream, q_max)?;
    let mut timer = Timer {
        flush: Flush::from_env(&stream)?,
        sleep: Sleep::new(&rt, cycles)?,
        start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        end: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
    };
    let largest = rows.iter().map(Row::kv_bytes).max().unwrap_or(0);
    eprintln!(
        "bench_kvcache on {}: {} rows{}, bf16, non-causal, full caches; {}; spin {cycles} \
         cycles before each call; largest K/V {:.1} GB; {:.1} GiB free",
        ctx.name()?,
        rows.len(),
        if quick { " (QUICK)" } else { "" },
        timer.flush.method(),
        largest as f64 / 1e9,
        ctx.mem_get_info()?.0 as f64 / (1u64 << 30) as f64,
    );
    let mut failed = 0;
    let dense_tflops = match dense_row(&rt, &stream, &mut timer, &fill) {
        Ok(j) => {
            let t = j["tflops"].as_f64();
            out.line(&j)?;
            t
        }
        Err(e) => {
            failed += 1;
            let (b, s, h, d) = DENSE;
            out.line(&json!({
                "kind": "dense", "b": b, "L": s, "sq": s, "h": h, "hk": h, "d": d,
                "error": e.to_string(),
            }))?;
            None
        }
    };
    for r in &rows {
        match run_row(&rt, &stream, &mut timer, &fill, r) {
            Ok(mut j) => {
                let dense = dense_tflops.filter(|_| r.kind == "prefill");
                if let (Some(dense), Some(m)) = (dense, j.as_object_mut()) {
                    let ratio = m["tflops"].as_f64().map(|t| t / dense);
                    m.insert("vs_dense".into(), json!(ratio));
                }
                if j["sleep_short"].as_u64().unwrap_or(0) > 0 {
                    eprintln!(
                        "bench_kvcache: {r:?}: the spin ended before the call was enqueued in \
                         {} calls (raise BENCH_SLEEP_CYCLES)",
                        j["sleep_short"]
                    );
                }
                out.line(&j)?;
            }
            Err(e) => {
                failed += 1;
                eprintln!("bench_kvcache: {r:?}: {e}");
                let mut j = r.keys();
                if let Some(m) = j.as_object_mut() {
                    m.insert("kv_bytes".into(), json!(r.kv_bytes()));
                    m.insert("error".into(), json!(e.to_string()));
                }
                out.line(&j)?;
            }
        }
    }
    Ok(failed)
}
