//! Paged against contiguous KV cache, the same problem through the public calls:
//! `forward_kvcache_into` over contiguous caches `[b, L, hk, d]` and
//! `forward_kvcache_paged_into` over page pools of 16 (vLLM's) and 256 rows, in turn,
//! three rounds (each round times every row's three variants one after the other), the
//! row's time the median of its three round medians. Rows: decode (1 query) and
//! speculative (4 queries) over GQA 32/8 d128 and MQA 8/1 d64 caches of 4K to 128K keys,
//! chunked prefill (512 queries) at 8K and 32K; bf16, non-causal, every sequence full.
//!
//! The page table scatters the pages over a pool larger than the cache (at least 8
//! fills' worth of pages; no two consecutive pages of a sequence adjacent, except by
//! chance): pool page `sigma(g)` holds logical page `g`, with `sigma` a random
//! permutation within each class of pages whose contents the 8M-element fill repeats
//! (`g mod M`). The paged call then computes exactly the contiguous one's problem, and
//! where both run the same split count its o and lse must equal the contiguous call's
//! bit for bit (else, small pages splitting sooner, the paged o is spot-checked against
//! float64 as the contiguous o always is: `check_row`).
//!
//! Timing as `bench_kvcache`'s (3 warm-ups, then the median of 20 calls, each after the
//! 256 MB L2 flush and a 200 000-cycle GPU spin, CUDA events around the call alone).
//! One JSON object per line on stdout: the row's keys, `splits` (the contiguous call's
//! count), `p16_splits`, `p256_splits` (the paged calls'), `contig_us`, `p16_us`, `p256_us`
//! (medians of the round medians), `rounds` (each round's three medians), and
//! `vs16` / `vs256` = contig_us / paged_us (1.0: as fast as contiguous), `sleep_short`
//! (calls whose enqueue outlasted the spin). The last line
//! is the summary: the geomean and the worst of each ratio.
//!
//! Env: BENCH_OUT (also write the JSON lines to this file), BENCH_ROUNDS (default 3),
//! BENCH_ROW=b,L,sq,d (that row alone, e.g. under ncu), BENCH_PAGED_SPLITS=n (the paged calls with exactly n splits, the contiguous one the
//! runtime's count: the paged o is then spot-checked against float64 instead of the
//! contiguous bits),
//! BENCH_TABLE=identity (page `g` of the cache in pool page `g`: the pages in order, to
//! tell the kernel's cost from that of scattered pages).
//! Run: `cargo run --release --features gpu --example bench_paged`.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::rng::Rng;
use flash_runtime::{FlashAttention, KvOptions, PagedKv, Tensor4, Tensor4Mut};
use half::bf16;
use serde_json::{Value, json};

mod bench_common;
use bench_common::{Flush, Sleep, attn_params, env_list, median};
#[path = "bench_kvcache/support.rs"]
mod support;
use support::{CHUNK, Fill, Out, Timer, check_row, tiled};

const PAGES: [usize; 2] = [16, 256];

/// One problem (the fields `support::check_row` reads).
#[derive(Clone, Copy, Debug)]
pub struct Row {
    kind: &'static str,
    b: usize,
    l: usize,
    sq: usize,
    h: usize,
    hk: usize,
    d: usize,
    /// No window (-1), no softcap (0), no ALiBi: the plain rows (`support::spot_reference`).
    left: i32,
    softcap: f32,
    alibi: bool,
}

fn rows() -> Vec<Row> {
    let r = |kind, b, l, sq, (h, hk, d)| Row {
        kind,
        b,
        l,
        sq,
        h,
        hk,
        d,
        left: -1,
        softcap: 0.0,
        alibi: false,
    };
    let (gqa, mqa, mha) = ((32, 8, 128), (8, 1, 64), (8, 8, 128));
    vec![
        r("decode", 1, 32768, 1, gqa),
        r("decode", 8, 4096, 1, gqa),
        r("decode", 8, 32768, 1, gqa),
        r("decode", 64, 4096, 1, gqa),
        r("decode", 64, 16384, 1, gqa),
        r("decode", 1, 131072, 1, mqa),
        r("decode", 8, 32768, 1, mqa),
        r("decode", 64, 4096, 1, mqa),
        r("decode", 8, 32768, 4, gqa),
        r("decode", 64, 4096, 4, mqa),
        r("prefill", 1, 8192, 512, mha),
        r("prefill", 1, 32768, 512, mha),
    ]
}

/// A paged copy of the row's contiguous caches: the pools (filled like the caches, from
/// the same 8M-element chunks) and the page table, `[b, L / page]`.
struct Paged {
    k: CudaSlice<bf16>,
    v: CudaSlice<bf16>,
    table: CudaSlice<i32>,
    pages: usize,
}

fn paged(
    stream: &Arc<CudaStream>,
    fill: &Fill,
    r: &Row,
    page: usize,
    rng: &mut Rng,
) -> Result<Paged, Box<dyn Error>> {
    let page_elems = page * r.hk * r.d;
    let period = CHUNK / page_elems; // pages whose contents the fill repeats
    let logical = r.b * r.l / page;
    let classes = logical.div_ceil(period).max(8); // pool pages per class
    let pages = classes * period;
    // sigma(g) = perm_{g mod period}[g / period] * period + g mod period
    let perms: Vec<Vec<usize>> = (0..period)
        .map(|_| {
            let mut p: Vec<usize> = (0..classes).collect();
            for i in (1..classes).rev() {
                p.swap(i, rng.below(i as u64 + 1) as usize);
            }
            p
        })
        .collect();
    let identity = std::env::var("BENCH_TABLE").is_ok_and(|v| v == "identity");
    let table: Vec<i32> = (0..logical)
        .map(|g| match identity {
            true => i32::try_from(g),
            false => i32::try_from(perms[g % period][g / period] * period + g % period),
        })
        .collect::<Result<_, _>>()?;
    Ok(Paged {
        k: tiled(stream, &fill.k, pages * page_elems)?,
        v: tiled(stream, &fill.v, pages * page_elems)?,
        table: stream.clone_htod(&table)?,
        pages,
    })
}

/// The row's three medians of one round: contiguous, then each page size; and the
/// outputs of each (o, lse), to compare.
type Round = ([f64; 3], usize, Vec<(Vec<bf16>, Vec<f32>)>);

fn round(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    timer: &mut Timer,
    r: &Row,
    (k_d, v_d, pools): (&CudaSlice<bf16>, &CudaSlice<bf16>, &[Paged]),
    q_d: &CudaSlice<bf16>,
) -> Result<Round, Box<dyn Error>> {
    let (qs, ks) = ([r.b, r.sq, r.h, r.d], [r.b, r.l, r.hk, r.d]);
    let (params, opts) = (attn_params(false), KvOptions::new());
    let paged_opts = match env_list("BENCH_PAGED_SPLITS", &[]).first() {
        Some(&n) => KvOptions::with_splits(n as u32),
        None => opts,
    };
    let reps = 20;
    let q = Tensor4::contiguous(q_d, qs);
    let (mut times, mut short) = ([0.0; 3], 0);
    let mut outs = Vec::new();
    for (i, t) in times.iter_mut().enumerate() {
        let mut o_d = stream.clone_htod(&vec![bf16::NAN; r.b * r.sq * r.h * r.d])?;
        let mut lse_d = stream.clone_htod(&vec![f32::NAN; r.b * r.h * r.sq])?;
        {
            let mut o = Tensor4Mut::contiguous(&mut o_d, qs);
            let timing = match i {
                0 => {
                    let (k, v) = (Tensor4::contiguous(k_d, ks), Tensor4::contiguous(v_d, ks));
                    timer.time(stream, reps, || {
                        let lse = Some(lse_d.as_view_mut());
                        rt.forward_kvcache_into(
                            stream, &q, &k, &v, None, &mut o, lse, &params, &opts,
                        )?;
                        Ok(())
                    })?
                }
                _ => {
                    let (p, page) = (&pools[i - 1], PAGES[i - 1]);
                    let pool = [p.pages, page, r.hk, r.d];
                    let cache = PagedKv::new(
                        Tensor4::contiguous(&p.k, pool),
                        Tensor4::contiguous(&p.v, pool),
                        p.table.as_view(),
                        [r.b, r.l / page],
                    );
                    timer.time(stream, reps, || {
                        let lse = Some(lse_d.as_view_mut());
                        rt.forward_kvcache_paged_into(
                            stream,
                            &q,
                            &cache,
                            None,
                            &mut o,
                            lse,
                            &params,
                            &paged_opts,
                        )?;
                        Ok(())
                    })?
                }
            };
            (*t, short) = (timing.median_us, short + timing.sleep_short);
        }
        outs.push((stream.clone_dtoh(&o_d)?, stream.clone_dtoh(&lse_d)?));
    }
    Ok((times, short, outs))
}

fn run_row(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    timer: &mut Timer,
    fill: &Fill,
    r: &Row,
    rounds: usize,
) -> Result<Value, Box<dyn Error>> {
    let n_kv = r.b * r.l * r.hk * r.d;
    let q_d = stream.clone_htod(&fill.q_host[..r.b * r.sq * r.h * r.d])?;
    let (k_d, v_d) = (tiled(stream, &fill.k, n_kv)?, tiled(stream, &fill.v, n_kv)?);
    let mut rng = Rng::new(0x7061_6765 ^ (r.b * r.l * r.sq) as u64);
    let pools = PAGES
        .iter()
        .map(|&p| paged(stream, fill, r, p, &mut rng))
        .collect::<Result<Vec<_>, _>>()?;
    // the split counts of the three calls: the paged o equals the contiguous bits where
    // they agree (same kernel arithmetic), else it is spot-checked against float64
    let q = [r.b, r.sq, r.h, r.d];
    let (params, opts) = (attn_params(false), KvOptions::new());
    let mut counts = vec![rt.kvcache_splits::<bf16>(q, [r.b, r.l, r.hk, r.d], &params, &opts)?];
    for page in PAGES {
        let shapes = ([r.b * r.l / page, page, r.hk, r.d], [r.b, r.l / page]);
        counts.push(rt.kvcache_paged_splits::<bf16>(q, shapes, &params, &opts)?);
    }
    let forced = !env_list("BENCH_PAGED_SPLITS", &[]).is_empty();
    let (mut medians, mut short): (Vec<[f64; 3]>, usize) = (Vec::new(), 0);
    for _ in 0..rounds {
        let (t, s, outs) = round(rt, stream, timer, r, (&k_d, &v_d, &pools), &q_d)?;
        short += s;
        let (o, lse) = &outs[0];
        check_row(fill, r, o, lse)?;
        for (i, (po, pl)) in outs[1..].iter().enumerate() {
            if forced || counts[i + 1] != counts[0] {
                // other splits, other rounding: the float64 spot check instead
                check_row(fill, r, po, pl)?;
                continue;
            }
            let same_o = po.iter().zip(o).all(|(a, b)| a.to_bits() == b.to_bits());
            let same_l = pl.iter().zip(lse).all(|(a, b)| a.to_bits() == b.to_bits());
            if !(same_o && same_l) {
                return Err(format!(
                    "page {}: o or lse differs from the contiguous call's bits",
                    PAGES[i]
                )
                .into());
            }
        }
        medians.push(t);
    }
    let med = |i: usize| median(medians.iter().map(|m| m[i]).collect());
    let (c, p16, p256) = (med(0), med(1), med(2));
    let [splits, s16, s256] = [counts[0], counts[1], counts[2]];
    Ok(json!({
        "kind": r.kind, "b": r.b, "L": r.l, "sq": r.sq, "h": r.h, "hk": r.hk, "d": r.d,
        "splits": splits, "p16_splits": s16, "p256_splits": s256, "contig_us": c, "p16_us": p16, "p256_us": p256,
        "vs16": c / p16, "vs256": c / p256, "rounds": medians, "sleep_short": short,
    }))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_paged: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let rt = FlashAttention::on_device(0)?;
    let stream = rt.context().default_stream();
    let ctx = rt.context();
    let rounds = env_list("BENCH_ROUNDS", &[3]).first().copied().unwrap_or(3);
    let mut out = Out(match std::env::var("BENCH_OUT") {
        Ok(p) if !p.is_empty() => Some(std::fs::File::create(&p)?),
        _ => None,
    });
    // BENCH_ROW=b,L,sq,d: that row alone (e.g. under a profiler)
    let only = env_list("BENCH_ROW", &[]);
    let rows: Vec<Row> = rows()
        .into_iter()
        .filter(|r| only.is_empty() || only == [r.b, r.l, r.sq, r.d])
        .collect();
    let q_max = rows
        .iter()
        .map(|r| r.b * r.sq * r.h * r.d)
        .max()
        .unwrap_or(0);
    let fill = Fill::new(&stream, q_max)?;
    let mut timer = Timer {
        flush: Flush::from_env(&stream)?,
        sleep: Sleep::new(&rt, 200_000)?,
        start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        end: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
    };
    eprintln!(
        "bench_paged on {}: {} rows x {rounds} rounds",
        ctx.name()?,
        rows.len()
    );
    let (mut logs, mut failed) = ([Vec::new(), Vec::new()], 0);
    for r in &rows {
        match run_row(&rt, &stream, &mut timer, &fill, r, rounds) {
            Ok(j) => {
                for (i, key) in ["vs16", "vs256"].iter().enumerate() {
                    logs[i].push(j[key].as_f64().unwrap_or(0.0));
                }
                out.line(&j)?;
            }
            Err(e) => {
                failed += 1;
                eprintln!("bench_paged: {r:?}: {e}");
                out.line(&json!({"kind": r.kind, "b": r.b, "L": r.l, "sq": r.sq,
                    "h": r.h, "hk": r.hk, "d": r.d, "error": e.to_string()}))?;
            }
        }
        stream.synchronize()?;
    }
    let geo = |x: &[f64]| (x.iter().map(|v| v.ln()).sum::<f64>() / x.len().max(1) as f64).exp();
    let worst = |x: &[f64]| x.iter().copied().fold(f64::INFINITY, f64::min);
    out.line(&json!({
        "summary": true, "failed": failed,
        "vs16_geomean": geo(&logs[0]), "vs16_worst": worst(&logs[0]),
        "vs256_geomean": geo(&logs[1]), "vs256_worst": worst(&logs[1]),
    }))?;
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} rows failed").into()),
    }
}
