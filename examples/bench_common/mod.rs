//! What `bench_fwd` and `bench_bwd` share: the FlashAttention-2 paper's setup, the sweep's
//! environment filters, the median and a row's attention parameters.
#![allow(dead_code)] // each bench uses its own subset

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use flash_runtime::{AttnParams, FlashAttention, Mask};

/// Tokens per row of the sweep (batch = TOKENS / seqlen).
pub const TOKENS: usize = 16384;
/// Model width (heads = HIDDEN / head_dim).
pub const HIDDEN: usize = 2048;
/// Untimed calls before the timed ones.
pub const WARMUP: usize = 5;

/// A comma list of integers from env `name`, else `default`.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

/// The backward's tile row named by env `name` (a `Tiling`'s serde name: `standard`,
/// `long`, `compact`, ...), or `None` where it is unset, empty or `auto` (the runtime's
/// rule).
pub fn tiling_env(name: &str) -> Result<Option<flash_runtime::flash_codegen::Tiling>, String> {
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() && s.trim() != "auto" => {
            serde_json::from_value(serde_json::json!(s.trim()))
                .map(Some)
                .map_err(|e| format!("{name} `{s}`: {e}"))
        }
        _ => Ok(None),
    }
}

/// Whether env `name` is set to something other than empty or "0".
pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v != "0" && !v.is_empty())
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

/// A row's attention: the causal mask or none, scale `1 / sqrt(d)` (both passes).
pub fn attn_params(causal: bool) -> AttnParams<'static> {
    AttnParams::new().with_mask(if causal { Mask::Causal } else { Mask::None })
}

/// The rows to time: env BENCH_D, BENCH_SEQ, BENCH_CAUSAL (0,1) and BENCH_ITERS.
pub struct Sweep {
    pub dims: Vec<usize>,
    pub seqs: Vec<usize>,
    pub causal: Vec<bool>,
    pub iters: usize,
}

impl Sweep {
    /// The sweep the environment asks for (default: the whole FA2-paper sweep, 20 calls).
    pub fn from_env() -> Self {
        Sweep {
            dims: env_list("BENCH_D", &[64, 128, 256]),
            seqs: env_list("BENCH_SEQ", &[512, 1024, 2048, 4096, 8192, 16384]),
            causal: env_list("BENCH_CAUSAL", &[0, 1])
                .into_iter()
                .map(|c| c != 0)
                .collect(),
            iters: env_list("BENCH_ITERS", &[20])
                .first()
                .copied()
                .unwrap_or(20)
                .max(1),
        }
    }
}

/// What `triton.testing.do_bench`, the peers' timer (`scripts/bench_compare*.py`), does
/// before every timed call: zero a 256 MB buffer. That evicts the inputs from L2 (the
/// peers run with cold caches too) and keeps the GPU busy while the host enqueues the
/// call, so the host's launch latency stays outside the events, as it does for the
/// peers. `BENCH_FLUSH=0` times without it (each call's launch latency then counts:
/// the method of sessions 1-5).
pub struct Flush(Option<CudaSlice<u8>>);

impl Flush {
    /// do_bench's buffer size (`int(256e6 // 4)` int32 values).
    const BYTES: usize = 256_000_000;

    /// The flush the environment asks for (on unless `BENCH_FLUSH=0`).
    pub fn from_env(stream: &Arc<CudaStream>) -> Result<Self, DriverError> {
        let on = std::env::var("BENCH_FLUSH").map_or(true, |v| v != "0");
        Ok(Flush(if on {
            Some(stream.alloc_zeros::<u8>(Self::BYTES)?)
        } else {
            None
        }))
    }

    /// Enqueues the flush (before the start event of a timed call).
    pub fn run(&mut self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
        match &mut self.0 {
            Some(buf) => stream.memset_zeros(buf),
            None => Ok(()),
        }
    }

    /// How calls are timed, for the report.
    pub fn method(&self) -> &'static str {
        match self.0 {
            Some(_) => "do_bench: 256 MB zeroed before each call, CUDA events around the call",
            None => "CUDA events around each call, no flush (launch latency included)",
        }
    }
}

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

/// The GPU spin enqueued before each timed call.
pub struct Sleep {
    f: CudaFunction,
    pub cycles: u64,
}

impl Sleep {
    pub fn new(rt: &FlashAttention, cycles: u64) -> Result<Self, Box<dyn Error>> {
        Ok(Sleep {
            f: rt.load_entry("flash_bench_sleep", SLEEP_PTX, 0)?,
            cycles,
        })
    }

    pub fn run(&self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
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

/// Timing after an L2 flush and a GPU spin past the host's enqueue (GPU time only): the
/// median ms of 15 calls after 5 warm-ups, the host's enqueue time of each timed call
/// (median, `host_ms`, one entry per `ms` call) and the calls whose enqueue outlasted the
/// spin (`sleep_short`: the GPU may have waited for the host inside the events).
pub struct SpinTimer {
    pub flush: Flush,
    pub sleep: Sleep,
    pub host_ms: Vec<f64>,
    pub sleep_short: usize,
    start: CudaEvent,
    end: CudaEvent,
}

impl SpinTimer {
    /// A flush as the environment asks (`BENCH_FLUSH`) and a spin of `cycles`.
    pub fn new(
        rt: &FlashAttention,
        stream: &Arc<CudaStream>,
        cycles: u64,
    ) -> Result<Self, Box<dyn Error>> {
        let ctx = rt.context();
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        Ok(SpinTimer {
            flush: Flush::from_env(stream)?,
            sleep: Sleep::new(rt, cycles)?,
            host_ms: Vec::new(),
            sleep_short: 0,
            start: event()?,
            end: event()?,
        })
    }

    /// Median ms of `f` over 15 timed calls after 5 warm-ups.
    pub fn ms(
        &mut self,
        s: &Arc<CudaStream>,
        mut f: impl FnMut() -> Result<(), Box<dyn Error>>,
    ) -> Result<f64, Box<dyn Error>> {
        for _ in 0..5 {
            f()?;
        }
        let mut v = Vec::new();
        let mut host = Vec::new();
        for _ in 0..15 {
            self.flush.run(s)?;
            self.sleep.run(s)?;
            self.start.record(s)?;
            let t0 = std::time::Instant::now();
            f()?;
            host.push(t0.elapsed().as_secs_f64() * 1e3);
            // the start event completes when the spin ends: done already means the GPU
            // may have waited for the host inside the events
            self.sleep_short += (self.start.is_complete() && self.sleep.cycles > 0) as usize;
            self.end.record(s)?;
            self.end.synchronize()?;
            v.push(self.start.elapsed_ms(&self.end)? as f64);
        }
        self.host_ms.push(median(host));
        Ok(median(v))
    }
}
