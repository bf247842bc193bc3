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
//! Env: QUICK=1, BENCH_OUT (also write the JSON lines to this file), BENCH_FLUSH=0 (no
//! L2 flush), BENCH_SLEEP_CYCLES (default 200000; 0: no spin).
//! Run: `cargo run --release --features gpu --example bench_kvcache`.

use std::error::Error;
use std::io::Write;
use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use flash_codegen::Arch;
use flash_runtime::rng::Rng;
use flash_runtime::tensor::contiguous_strides;
use flash_runtime::validate::{GpuFill, KvArgs, TensorDesc, plan_kvcache};
use flash_runtime::{AttnParams, Element, FlashAttention, KvOptions, Tensor4, Tensor4Mut};
use half::bf16;
use serde_json::{Value, json};

mod bench_common;
use bench_common::{Flush, attn_params, env_flag, env_list, median};

/// Untimed calls before the timed ones (the script's).
const WARMUP: usize = 3;
/// `torch.cuda._sleep(200_000)`: the script's spin before each timed call.
const SLEEP_CYCLES: u64 = 200_000;
/// Elements of each random fill chunk (tiled over K and V): 16 MB of bf16, a multiple of
/// every row (hk * d), so a cache row never wraps around the chunk.
const CHUNK: usize = 1 << 23;
/// The dense forward reference row: b, sq = sk, h, d.
const DENSE: (usize, usize, usize, usize) = (2, 8192, 16, 128);

/// A spin of `cycles` SM clock cycles on one thread (torch's `_sleep` kernel in PTX).
const SLEEP_PTX: &str = "\
.version 7.0
.target sm_80
.address_size 64

.visible .entry flash_bench_sleep(
\t.param .u64 flash_bench_sleep_cycles
)
{
\t.reg .pred \t%p<2>;
\t.reg .b64 \t%rd<5>;

\tld.param.u64 \t%rd1, [flash_bench_sleep_cycles];
\tmov.u64 \t%rd2, %clock64;
$L_spin:
\tmov.u64 \t%rd3, %clock64;
\tsub.s64 \t%rd4, %rd3, %rd2;
\tsetp.lt.u64 \t%p1, %rd4, %rd1;
\t@%p1 bra \t$L_spin;
\tret;
}
";

/// One row of `scripts/bench_kvcache.py`.
#[derive(Clone, Copy, Debug)]
struct Row {
    kind: &'static str,
    b: usize,
    l: usize,
    sq: usize,
    h: usize,
    hk: usize,
    d: usize,
}

impl Row {
    /// K and V bytes (bf16).
    fn kv_bytes(&self) -> usize {
        self.b * self.l * self.hk * self.d * 2 * 2
    }

    fn flops(&self) -> f64 {
        4.0 * (self.b * self.h * self.sq) as f64 * (self.l * self.d) as f64
    }

    fn keys(&self) -> Value {
        json!({
            "kind": self.kind, "b": self.b, "L": self.l, "sq": self.sq,
            "h": self.h, "hk": self.hk, "d": self.d,
        })
    }
}

/// `bench_kvcache.py`'s `rows()`, in its order.
fn rows(quick: bool) -> Vec<Row> {
    let (batches, caches, qs): (&[usize], &[usize], &[usize]) = if quick {
        (&[1, 64], &[4096, 32768], &[1, 16])
    } else {
        (&[1, 8, 64], &[4096, 32768, 131072], &[1, 4, 16])
    };
    let mut out = Vec::new();
    for d in [128, 64] {
        for (h, hk) in [(32, 8), (8, 1)] {
            for &b in batches {
                for &l in caches {
                    if (b * l * hk * d * 4) as f64 > 40e9 {
                        continue;
                    }
                    for &sq in qs {
                        out.push(Row {
                            kind: "decode",
                            b,
                            l,
                            sq,
                            h,
                            hk,
                            d,
                        });
                    }
                }
            }
        }
    }
    let prefill: &[usize] = if quick {
        &[8192, 32768]
    } else {
        &[8192, 16384, 32768, 65536, 131072]
    };
    for &l in prefill {
        out.push(Row {
            kind: "prefill",
            b: 1,
            l,
            sq: 512,
            h: 8,
            hk: 8,
            d: 128,
        });
    }
    out
}

/// The GPU spin enqueued before each timed call.
struct Sleep {
    f: CudaFunction,
    cycles: u64,
}

impl Sleep {
    fn new(rt: &FlashAttention, cycles: u64) -> Result<Self, Box<dyn Error>> {
        Ok(Sleep {
            f: rt.load_entry("flash_bench_sleep", SLEEP_PTX, 0)?,
            cycles,
        })
    }

    fn run(&self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
        if self.cycles == 0 {
            return Ok(());
        }
        let mut b = stream.launch_builder(&self.f);
        b.arg(&self.cycles);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `flash_bench_sleep` takes one .u64 by value (`cycles`, pushed above) and
        // touches no memory; one thread, no shared memory.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// The per-call timing loop: flush, spin, start event, the call, end event.
struct Timer {
    flush: Flush,
    sleep: Sleep,
    start: CudaEvent,
    end: CudaEvent,
}

/// A row's times.
struct Timing {
    median_us: f64,
    /// Timed calls whose enqueue finished after the spin had ended (host time may count).
    sleep_short: usize,
}

impl Timer {
    fn time(
        &mut self,
        stream: &Arc<CudaStream>,
        reps: usize,
        mut call: impl FnMut() -> Result<(), Box<dyn Error>>,
    ) -> Result<Timing, Box<dyn Error>> {
        let mut times = Vec::with_capacity(reps);
        let mut sleep_short = 0;
        for i in 0..WARMUP + reps {
            self.flush.run(stream)?;
            self.sleep.run(stream)?;
            self.start.record(stream)?;
            call()?;
            self.end.record(stream)?;
            // the start event completes when the spin ends: done already means the GPU
            // may have waited for the host inside the events
            let short = self.start.is_complete();
            let us = self.start.elapsed_ms(&self.end)? as f64 * 1e3;
            if i >= WARMUP {
                times.push(us);
                sleep_short += (short && self.sleep.cycles > 0) as usize;
            }
        }
        Ok(Timing {
            median_us: median(times),
            sleep_short,
        })
    }
}

/// The random fill: two device chunks tiled over K and V, and q's values (host copies
/// kept for the reference spot checks).
struct Fill {
    k: CudaSlice<bf16>,
    v: CudaSlice<bf16>,
    k_host: Vec<bf16>,
    v_host: Vec<bf16>,
    q_host: Vec<bf16>,
}

impl Fill {
    fn new(stream: &Arc<CudaStream>, q_max: usize) -> Result<Self, Box<dyn Error>> {
        let mut rng = Rng::new(0x6b76_be4c);
        let mut rand =
            |n: usize| -> Vec<bf16> { (0..n).map(|_| bf16::from_f32(rng.normal())).collect() };
        let (k_host, v_host, q_host) = (rand(CHUNK), rand(CHUNK), rand(q_max));
        Ok(Fill {
            k: stream.clone_htod(&k_host)?,
            v: stream.clone_htod(&v_host)?,
            k_host,
            v_host,
            q_host,
        })
    }
}

/// A device buffer of `n` elements: `chunk` repeated (element `i` is `chunk[i % len]`).
fn tiled(
    stream: &Arc<CudaStream>,
    chunk: &CudaSlice<bf16>,
    n: usize,
) -> Result<CudaSlice<bf16>, DriverError> {
    let mut buf = stream.alloc_zeros::<bf16>(n.max(1))?;
    let c = chunk.len();
    let mut at = 0;
    while at < n {
        let m = c.min(n - at);
        stream.memcpy_dtod(&chunk.slice(..m), &mut buf.slice_mut(at..at + m))?;
        at += m;
    }
    Ok(buf)
}

/// The split count the runtime's planner picks for a row on this GPU: `plan_kvcache`
/// (what `forward_kvcache_into` calls) on contiguous descriptions of the row's shapes at
/// made-up addresses (the count depends on the shapes, the mask and the GPU only).
fn planned_splits(
    rt: &FlashAttention,
    q_shape: [usize; 4],
    k_shape: [usize; 4],
    params: &AttnParams,
    opts: &KvOptions,
) -> Result<u32, Box<dyn Error>> {
    let sms = rt
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let desc = |shape: [usize; 4], ptr: u64| TensorDesc {
        shape,
        strides: contiguous_strides(shape),
        ptr,
        len: shape.iter().product::<usize>().max(1),
        dtype: bf16::DTYPE,
    };
    let args = KvArgs {
        q: desc(q_shape, 1 << 40),
        k: desc(k_shape, 2 << 40),
        v: desc(k_shape, 3 << 40),
        o: desc(q_shape, 4 << 40),
        lse: None,
        seqlens_k: None,
        params: *params,
        num_splits: opts.num_splits,
    };
    let gpu = GpuFill {
        sms: sms.max(1) as u32,
        smem_optin: rt.smem_limit(),
    };
    // FlashAttention runs the sm_80 kernels on every GPU (FlashAttention::new)
    Ok(plan_kvcache(&args, Arch::Sm80, gpu)?.num_splits)
}

/// Float64 o row and lse of query `qi`, head `hi` of sequence `bi` of a row (full cache,
/// no mask), from the fill's host values.
fn spot_reference(f: &Fill, r: &Row, bi: usize, qi: usize, hi: usize) -> (Vec<f64>, f64) {
    let (l, h, hk, d, sq) = (r.l, r.h, r.hk, r.d, r.sq);
    let kh = hi / (h / hk);
    let qo = ((bi * sq + qi) * h + hi) * d;
    let q: Vec<f64> = f.q_host[qo..qo + d].iter().map(|x| x.to_f64()).collect();
    let scale = 1.0 / (d as f64).sqrt();
    let row = |j: usize| (((bi * l + j) * hk + kh) * d) % CHUNK;
    let s: Vec<f64> = (0..l)
        .map(|j| {
            let k = &f.k_host[row(j)..row(j) + d];
            q.iter().zip(k).map(|(a, b)| a * b.to_f64()).sum::<f64>() * scale
        })
        .collect();
    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut o = vec![0.0; d];
    let mut sum = 0.0;
    for (j, &sj) in s.iter().enumerate() {
        let p = (sj - m).exp();
        sum += p;
        for (x, v) in o.iter_mut().zip(&f.v_host[row(j)..row(j) + d]) {
            *x += p * v.to_f64();
        }
    }
    o.iter_mut().for_each(|x| *x /= sum);
    (o, m + sum.ln())
}

/// Checks o (every element finite) and lse of a row, and two (batch, query, head)
/// positions against the float64 reference.
fn check_row(f: &Fill, r: &Row, o: &[bf16], lse: &[f32]) -> Result<(), String> {
    let bad = o.iter().filter(|x| !x.to_f32().is_finite()).count();
    if bad > 0 {
        return Err(format!(
            "{bad} of {} outputs not finite (kernel wrong or not writing)",
            o.len()
        ));
    }
    let (b, sq, h, d) = (r.b, r.sq, r.h, r.d);
    for (bi, qi, hi) in [(0, 0, 0), (b - 1, sq - 1, h - 1)] {
        let (want, want_lse) = spot_reference(f, r, bi, qi, hi);
        let at = ((bi * sq + qi) * h + hi) * d;
        let (mut num, mut den) = (0.0, 0.0);
        for (g, w) in o[at..at + d].iter().zip(&want) {
            num += (g.to_f64() - w).powi(2);
            den += w * w;
        }
        let err = (num / den.max(1e-300)).sqrt();
        let got_lse = lse[(bi * h + hi) * sq + qi] as f64;
        let lse_ok = (got_lse - want_lse).abs() <= 1e-3; // false for NaN
        if !(err <= 1e-2 && lse_ok) {
            return Err(format!(
                "b{bi} q{qi} h{hi} against the f64 reference: o rel-L2 {err:.2e} (> 1e-2?), \
                 lse {got_lse} want {want_lse}"
            ));
        }
    }
    Ok(())
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
    let params = attn_params(false);
    let opts = KvOptions::new();
    let splits = planned_splits(rt, qs, ks, &params, &opts)?;
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

/// Stdout and, with BENCH_OUT, a file: one JSON object per line.
struct Out(Option<std::fs::File>);

impl Out {
    fn line(&mut self, v: &Value) -> Result<(), Box<dyn Error>> {
        let s = v.to_string();
        println!("{s}");
        if let Some(f) = &mut self.0 {
            writeln!(f, "{s}")?;
            f.flush()?;
        }
        Ok(())
    }
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
    let rows = rows(quick);
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
