//! Backward-pass benchmark, same sweep as `bench_fwd` (FlashAttention-2 paper setup): hidden
//! 2048 (heads = 2048 / d), 16384 tokens (batch = 16384 / seqlen), d in {64, 128, 256},
//! causal and not, seqlen 512..16K, bf16 and f16. Per row: our forward once (o, lse), then
//! 5 warm-ups and the median of >= 20 whole backward calls (BwdPre + Bwd + BwdPost, or
//! BwdDq in deterministic mode; scratch passed in) timed with CUDA events, each after
//! do_bench's 256 MB L2 flush (`bench_common::Flush`; BENCH_FLUSH=0: without) and a GPU spin
//! of BENCH_SLEEP_CYCLES clock cycles (default 1 500 000, ~0.75 ms: longer than the
//! backward's host-side enqueue, so the GPU does not wait for the host inside the events;
//! 0: no spin, the timing of sessions before 34). TFLOP/s from
//! 2.5 x the forward's 4 * b * h * n^2 * d (half if causal), in both modes.
//!
//! Env: BENCH_OUT (JSON path, default bench_bwd.json), BENCH_D, BENCH_SEQ (comma lists),
//! BENCH_DTYPE (bf16,f16), BENCH_CAUSAL (0,1), BENCH_ITERS (default 20), BENCH_DET (default
//! the library's default mode, atomic; BENCH_DET=1 times the deterministic mode),
//! BENCH_FLUSH=0 (no L2 flush), BENCH_SMEM (bytes: plan as a GPU with that much shared
//! memory per block, `limit_smem`; 101376 times the 99 KiB GPUs' compact rows), BENCH_SMEM_SM
//! (bytes per SM, `limit_smem_per_sm`: 167936 runs as many CTAs per SM as an A100). BENCH_MEM=1 instead measures the device memory that forward +
//! backward need beyond q, k, v, dO (1 x 32 heads x 16K x d128, causal, f16) with
//! cuMemGetInfo, in atomic and deterministic mode.
//!
//! Grouped-query rows (`bench_common/bwd_rows.rs`): BENCH_HEADS (`h/hk` pairs, e.g.
//! `32/8,28/4`: those heads instead of 2048 / d; k, v, dk, dv `[b, s, hk, d]`), BENCH_SPLITS
//! (`with_group_splits`; 0 = automatic, the default; rows without GQA run once),
//! BENCH_TOKENS (default 16384: batch = tokens / seqlen). FLOPs count the query heads. Each
//! row records `heads_k` and `group_splits` (0 = automatic). BENCH_TILING (standard, long,
//! compact): the main pass on that row (`BwdOptions::with_tiling`), recorded as `tiling`.
//! Run: `cargo run --release --features gpu --example bench_bwd`.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::rng::Rng;
use flash_runtime::{
    BwdInputs, BwdOptions, BwdScratch, Element, FlashAttention, GradsMut, Tensor4, Tensor4Mut,
};

mod bench_common;
use bench_common::{HIDDEN, SpinTimer, Sweep, WARMUP, attn_params, env_flag, env_list, median};
#[path = "bench_common/bwd_rows.rs"]
mod bwd_rows;
use bwd_rows::{BwdRows, Row, tiling_from_env, with_splits};
const GIB: f64 = (1u64 << 30) as f64;

type Res<T> = Result<T, Box<dyn Error>>;

/// The backward's mode: deterministic, or atomic dQ; the main pass's row BENCH_TILING's.
fn bwd_opts(deterministic: bool) -> BwdOptions {
    let o = match deterministic {
        true => BwdOptions::deterministic(),
        false => BwdOptions::default(),
    };
    match tiling_from_env() {
        Ok(Some(t)) => o.with_tiling(t),
        _ => o,
    }
}

fn randn<T: Element>(stream: &Arc<CudaStream>, rng: &mut Rng, n: usize) -> Res<CudaSlice<T>> {
    let x: Vec<T> = (0..n).map(|_| T::from_f32(rng.normal())).collect();
    Ok(stream.clone_htod(&x)?)
}

/// Flat buffers for the largest row (`BwdRows::sizes`; paper setup: TOKENS * HIDDEN
/// elements), reshaped per row: q-like (q, dO, o, dq), k-like (k, v, dk, dv), f32 lse.
struct Bufs<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    d_o: CudaSlice<T>,
    o: CudaSlice<T>,
    dq: CudaSlice<T>,
    dk: CudaSlice<T>,
    dv: CudaSlice<T>,
    nan: CudaSlice<T>,
    lse: CudaSlice<f32>,
}

fn bufs<T: Element>(
    stream: &Arc<CudaStream>,
    seed: u64,
    (n, nk, nl): (usize, usize, usize),
) -> Res<Bufs<T>> {
    let mut rng = Rng::new(seed);
    Ok(Bufs {
        q: randn(stream, &mut rng, n)?,
        k: randn(stream, &mut rng, nk)?,
        v: randn(stream, &mut rng, nk)?,
        d_o: randn(stream, &mut rng, n)?,
        o: stream.alloc_zeros(n)?,
        dq: stream.alloc_zeros(n)?,
        dk: stream.alloc_zeros(nk)?,
        dv: stream.alloc_zeros(nk)?,
        nan: stream.clone_htod(&vec![T::from_f32(f32::NAN); n.max(nk)])?,
        lse: stream.alloc_zeros(nl)?,
    })
}

/// One forward (o, lse) and `WARMUP + iters` timed backward calls: (median ms, min ms).
fn time_row<T: Element>(
    (rt, stream): (&FlashAttention, &Arc<CudaStream>),
    bu: &mut Bufs<T>,
    row: &Row,
    opts: BwdOptions,
    iters: usize,
    timer: &mut SpinTimer,
) -> Res<(f64, f64)> {
    let params = attn_params(row.causal);
    let (shape, kv_shape) = (row.q_shape(), row.kv_shape());
    let c = |x| Tensor4::contiguous(x, shape);
    let ck = |x| Tensor4::contiguous(x, kv_shape);
    rt.forward_into(
        stream,
        &c(&bu.q),
        &ck(&bu.k),
        &ck(&bu.v),
        &mut Tensor4Mut::contiguous(&mut bu.o, shape),
        Some(bu.lse.as_view_mut()),
        &params,
    )?;
    for g in [&mut bu.dq, &mut bu.dk, &mut bu.dv] {
        // poison: every call must overwrite the gradients
        stream.memcpy_dtod(&bu.nan.slice(..g.len()), g)?;
    }
    // (with room for the group split's partials: none allocated inside the timed calls)
    let mut scratch = BwdScratch::for_shapes(rt, stream, (shape, kv_shape), &opts)?;
    let (q, k, v, o, d_o) = (c(&bu.q), ck(&bu.k), ck(&bu.v), c(&bu.o), c(&bu.d_o));
    let lse = bu.lse.as_view();
    let inputs = BwdInputs {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        lse: &lse,
        d_o: &d_o,
    };
    let mut dq = Tensor4Mut::contiguous(&mut bu.dq, shape);
    let mut dk = Tensor4Mut::contiguous(&mut bu.dk, kv_shape);
    let mut dv = Tensor4Mut::contiguous(&mut bu.dv, kv_shape);
    let ctx = rt.context();
    let ev = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let (start, end) = (ev()?, ev()?);
    let mut times = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        timer.flush.run(stream)?;
        timer.sleep.run(stream)?;
        start.record(stream)?;
        // preallocated gradients and scratch: no allocation inside the events
        let grads = GradsMut {
            dq: &mut dq,
            dk: &mut dk,
            dv: &mut dv,
        };
        rt.backward_into(stream, inputs, grads, &params, &opts, Some(&mut scratch))?;
        end.record(stream)?;
        let ms = start.elapsed_ms(&end)? as f64;
        if i >= WARMUP {
            times.push(ms);
        }
    }
    let (len, len_k): (usize, usize) = (shape.iter().product(), kv_shape.iter().product());
    for (name, g, len) in [
        ("dq", &bu.dq, len),
        ("dk", &bu.dk, len_k),
        ("dv", &bu.dv, len_k),
    ] {
        let out: Vec<T> = stream.clone_dtoh(&g.slice(..len))?;
        let bad = out.iter().filter(|x| !x.to_f32().is_finite()).count();
        if bad > 0 {
            return Err(format!("{bad} of {len} {name} values not finite").into());
        }
    }
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((median(times), min))
}

fn sweep<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    (sw, rs, deterministic): (&Sweep, &BwdRows, bool),
    rows: &mut Vec<serde_json::Value>,
    timer: &mut SpinTimer,
) -> Res<()> {
    let list = rs.rows(sw);
    let mut bu = bufs::<T>(stream, 0xb4c4 ^ T::DTYPE as u64, rs.sizes(&list))?;
    for r in &list {
        let (mut med, mut min, mut error) = (f64::NAN, f64::NAN, rs.invalid(r));
        if error.is_none() {
            let opts = with_splits(bwd_opts(deterministic), r.s);
            match time_row((rt, stream), &mut bu, r, opts, sw.iters, timer) {
                Ok(t) => (med, min) = t,
                Err(e) => error = Some(e.to_string()),
            }
        }
        let tflops = r.flops() / med / 1e9;
        println!(
            "{:5} {:4} {:6} {:6} {:4} {:4}{} {:10.4} {:10.4} {:9.1}  {}",
            T::DTYPE.name(),
            r.d,
            r.causal as u8,
            r.n,
            r.b,
            r.h,
            rs.cols(Some(r)),
            med,
            min,
            tflops,
            error.as_deref().unwrap_or("")
        );
        rows.push(serde_json::json!({
            "backend": "flash_ptx", "dtype": T::DTYPE.name(), "d": r.d, "causal": r.causal,
            "n": r.n, "b": r.b, "h": r.h, "deterministic": deterministic,
            "bwd_ms": med, "bwd_ms_min": min, "bwd_tflops": tflops, "error": error,
            "heads_k": r.hk, "group_splits": r.s, "tiling": opts_tiling(),
        }));
    }
    Ok(())
}

/// The main pass's row as BENCH_TILING fixes it (its serde name), or "auto".
fn opts_tiling() -> serde_json::Value {
    match tiling_from_env() {
        Ok(Some(t)) => serde_json::json!(t),
        _ => "auto".into(),
    }
}

/// Device bytes in use (total - free), after the stream's work is done.
fn used(rt: &FlashAttention, stream: &Arc<CudaStream>) -> Res<u64> {
    stream.synchronize()?;
    let (free, total) = rt.context().mem_get_info()?;
    Ok((total - free) as u64)
}

/// Forward + backward on `shape` with everything but q, k, v, dO allocated in between two
/// cuMemGetInfo readings: (measured bytes, computed bytes).
fn extra_memory<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    shape: [usize; 4],
    deterministic: bool,
) -> Res<(u64, u64)> {
    let [b, n, h, _] = shape;
    let len: usize = shape.iter().product();
    let mut rng = Rng::new(0x3e3);
    let (q, k, v, d_o) = (
        randn::<T>(stream, &mut rng, len)?,
        randn::<T>(stream, &mut rng, len)?,
        randn::<T>(stream, &mut rng, len)?,
        randn::<T>(stream, &mut rng, len)?,
    );
    let before = used(rt, stream)?;
    let mut o = stream.alloc_zeros::<T>(len)?;
    let mut lse = stream.alloc_zeros::<f32>(b * h * n)?;
    let c = |x| Tensor4::contiguous(x, shape);
    let params = attn_params(true);
    let mut o_t = Tensor4Mut::contiguous(&mut o, shape);
    rt.forward_into(
        stream,
        &c(&q),
        &c(&k),
        &c(&v),
        &mut o_t,
        Some(lse.as_view_mut()),
        &params,
    )?;
    let (mut dq, mut dk, mut dv) = (
        stream.alloc_zeros::<T>(len)?,
        stream.alloc_zeros::<T>(len)?,
        stream.alloc_zeros::<T>(len)?,
    );
    let mut scratch = BwdScratch::new(stream, shape, deterministic)?;
    // everything preallocated between the two readings (the allocating calls would free
    // their scratch before the second one)
    rt.backward_into(
        stream,
        BwdInputs {
            q: &c(&q),
            k: &c(&k),
            v: &c(&v),
            o: &c(&o),
            lse: &lse.as_view(),
            d_o: &c(&d_o),
        },
        GradsMut {
            dq: &mut Tensor4Mut::contiguous(&mut dq, shape),
            dk: &mut Tensor4Mut::contiguous(&mut dk, shape),
            dv: &mut Tensor4Mut::contiguous(&mut dv, shape),
        },
        &params,
        &bwd_opts(deterministic),
        Some(&mut scratch),
    )?;
    let after = used(rt, stream)?;
    let grads_and_o = 4 * len * std::mem::size_of::<T>();
    let computed = grads_and_o + 4 * b * h * n + BwdScratch::bytes(shape, deterministic);
    Ok((after.saturating_sub(before), computed as u64))
}

fn memory(rt: &FlashAttention, stream: &Arc<CudaStream>) -> Res<serde_json::Value> {
    let shape = [1, 16384, 32, 128];
    // load every kernel first, so module memory is not counted
    for det in [false, true] {
        extra_memory::<half::f16>(rt, stream, [1, 128, 2, 128], det)?;
    }
    let mut rows = Vec::new();
    println!("extra device memory of forward + backward beyond q, k, v, dO: {shape:?} causal f16");
    for det in [false, true] {
        let (measured, computed) = extra_memory::<half::f16>(rt, stream, shape, det)?;
        let mode = if det { "deterministic" } else { "atomic" };
        println!(
            "  {mode:13}: measured {:.3} GiB (cuMemGetInfo), computed {:.3} GiB \
             (o, lse, dq, dk, dv, scratch {:.3} GiB)",
            measured as f64 / GIB,
            computed as f64 / GIB,
            BwdScratch::bytes(shape, det) as f64 / GIB
        );
        rows.push(serde_json::json!({
            "mode": mode, "shape": shape, "measured_gib": measured as f64 / GIB,
            "computed_gib": computed as f64 / GIB,
        }));
    }
    Ok(serde_json::json!({ "memory": rows }))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_bwd: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let mut rt = FlashAttention::on_device(0)?;
    // the rows a GPU with that much shared memory per block runs; as many CTAs per SM
    if let Some(&b) = env_list("BENCH_SMEM", &[]).first() {
        rt.limit_smem(b as u64);
    }
    if let Some(&b) = env_list("BENCH_SMEM_SM", &[]).first() {
        rt.limit_smem_per_sm(b as u64);
    }
    let stream = rt.context().default_stream();
    let ctx = rt.context();
    let gpu = ctx.name()?;
    let (maj, min) = ctx.compute_capability()?;
    let path = std::env::var("BENCH_OUT").unwrap_or_else(|_| "bench_bwd.json".into());
    let rs = BwdRows::from_env()?;
    tiling_from_env()?; // (a bad BENCH_TILING: an error before any row)
    let mut report = serde_json::json!({
        "gpu": gpu, "compute_capability": format!("{maj}.{min}"),
        "tokens": rs.tokens, "hidden": HIDDEN, "warmup": WARMUP, "smem_limit": rt.smem_limit(),
        "smem_per_sm": rt.smem_per_sm(),
    });
    if env_flag("BENCH_MEM") {
        report["memory"] = memory(&rt, &stream)?["memory"].take();
    } else {
        let sw = Sweep::from_env();
        let deterministic = match std::env::var("BENCH_DET") {
            Ok(_) => env_flag("BENCH_DET"),
            Err(_) => BwdOptions::default().deterministic,
        };
        let mode = if deterministic {
            "deterministic"
        } else {
            "atomic"
        };
        let cycles = env_list("BENCH_SLEEP_CYCLES", &[1_500_000])
            .first()
            .copied()
            .unwrap_or(1_500_000);
        // (its flush and spin before each call; this bench records its own events)
        let mut timer = SpinTimer::new(&rt, &stream, cycles as u64)?;
        println!(
            "flash-ptx backward ({mode}) on {gpu}: {}, median of {} calls; {}; spin {cycles} \
             cycles before each call",
            rs.describe(),
            sw.iters,
            timer.flush.method()
        );
        let gqa = rs.cols(None);
        println!(
            "{:5} {:>4} {:>6} {:>6} {:>4} {:>4}{gqa} {:>10} {:>10} {:>9}",
            "dtype", "d", "causal", "n", "b", "h", "ms", "ms_min", "TFLOP/s"
        );
        let (mut rows, cfg) = (Vec::new(), (&sw, &rs, deterministic));
        for dt in std::env::var("BENCH_DTYPE")
            .unwrap_or_else(|_| "bf16,f16".into())
            .split(',')
            .map(str::trim)
        {
            match dt {
                "bf16" => sweep::<half::bf16>(&rt, &stream, cfg, &mut rows, &mut timer)?,
                "f16" => sweep::<half::f16>(&rt, &stream, cfg, &mut rows, &mut timer)?,
                other => eprintln!("skipping unknown dtype `{other}` (use bf16, f16)"),
            }
        }
        report["iters"] = sw.iters.into();
        report["timing"] = timer.flush.method().into();
        report["spin_cycles"] = cycles.into();
        report["deterministic"] = deterministic.into();
        report["heads"] = serde_json::json!(rs.heads);
        report["group_splits"] = serde_json::json!(rs.splits);
        report["rows"] = rows.into();
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {path}");
    Ok(())
}
