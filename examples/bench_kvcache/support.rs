//! The machinery of `bench_kvcache` (`examples/bench_kvcache.rs`): the per-call timer
//! (flush, spin, CUDA events, median), the random fill tiled over K and V,
//! the split count the runtime plans for a row, the float64 spot checks of a row's output,
//! and the JSON-lines writer.

use std::error::Error;
use std::io::Write;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DriverError};
use flash_runtime::rng::Rng;
use half::bf16;
use serde_json::Value;

use super::Row;
use crate::bench_common::{Flush, Sleep, median};

/// Untimed calls before the timed ones (the script's).
pub const WARMUP: usize = 3;
/// Elements of each random fill chunk (tiled over K and V): 16 MB of bf16, a multiple of
/// every row (hk * d), so a cache row never wraps around the chunk.
pub const CHUNK: usize = 1 << 23;

/// The per-call timing loop: flush, spin, start event, the call, end event.
pub struct Timer {
    pub flush: Flush,
    pub sleep: Sleep,
    pub start: CudaEvent,
    pub end: CudaEvent,
}

/// A row's times.
pub struct Timing {
    pub median_us: f64,
    /// Timed calls whose enqueue finished after the spin had ended (host time may count).
    pub sleep_short: usize,
}

impl Timer {
    pub fn time(
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
pub struct Fill {
    pub k: CudaSlice<bf16>,
    pub v: CudaSlice<bf16>,
    pub k_host: Vec<bf16>,
    pub v_host: Vec<bf16>,
    pub q_host: Vec<bf16>,
}

impl Fill {
    pub fn new(stream: &Arc<CudaStream>, q_max: usize) -> Result<Self, Box<dyn Error>> {
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
pub fn tiled(
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

/// Float64 o row and lse of query `qi`, head `hi` of sequence `bi` of a row (full cache;
/// the row's window `(left, 0)`, softcap and ALiBi: BLOOM's slope of head `hi`), from
/// the fill's host values.
pub fn spot_reference(f: &Fill, r: &Row, bi: usize, qi: usize, hi: usize) -> (Vec<f64>, f64) {
    let (l, h, hk, d, sq) = (r.l, r.h, r.hk, r.d, r.sq);
    let kh = hi / (h / hk);
    let qo = ((bi * sq + qi) * h + hi) * d;
    let q: Vec<f64> = f.q_host[qo..qo + d].iter().map(|x| x.to_f64()).collect();
    let scale = 1.0 / (d as f64).sqrt();
    let row = |j: usize| (((bi * l + j) * hk + kh) * d) % CHUNK;
    // the query's position is l - sq + qi; a window sees keys pos - left ..= pos
    let first = match r.left {
        -1 => 0,
        left => (l - sq + qi).saturating_sub(left as usize),
    };
    let last = match r.left {
        -1 => l,
        _ => l - sq + qi + 1,
    };
    let cap = f64::from(r.softcap);
    let slope = match r.alibi {
        true => f64::from((-8.0 * (hi as f32 + 1.0) / h as f32).exp2()),
        false => 0.0,
    };
    let pos = (l - sq + qi) as f64;
    let s: Vec<f64> = (0..l)
        .map(|j| {
            if j < first || j >= last {
                return f64::NEG_INFINITY;
            }
            let k = &f.k_host[row(j)..row(j) + d];
            let x = q.iter().zip(k).map(|(a, b)| a * b.to_f64()).sum::<f64>() * scale;
            let x = if cap > 0.0 { cap * (x / cap).tanh() } else { x };
            x - slope * (pos - j as f64).abs()
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
pub fn check_row(f: &Fill, r: &Row, o: &[bf16], lse: &[f32]) -> Result<(), String> {
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

/// Stdout and, with BENCH_OUT, a file: one JSON object per line.
pub struct Out(pub Option<std::fs::File>);

impl Out {
    pub fn line(&mut self, v: &Value) -> Result<(), Box<dyn Error>> {
        let s = v.to_string();
        println!("{s}");
        if let Some(f) = &mut self.0 {
            writeln!(f, "{s}")?;
            f.flush()?;
        }
        Ok(())
    }
}
