//! The KV-cache GPU test's machinery (`tests/gpu_kvcache.rs`): a case (shapes, seqlens_k,
//! split request, layout), the split count the runtime plans for it, where its caches sit,
//! and the group runner (one line a case, a summary, a panic listing the failures). The
//! run and checks of one case are in `run.rs`.

use std::error::Error;
use std::time::Instant;

use flash_codegen::DType;
use flash_runtime::reference::Modifiers;
use flash_runtime::{AttnParams, FlashAttention, KvOptions};

use crate::gpu_support::{Placed, attn_params, report_case};

mod paged;
mod run;
pub use paged::Paging;
use run::run_case;

/// What fills o's buffer outside the view (exact in f16 and bf16).
pub const O_SENTINEL: f32 = 12288.0;
/// What fills the bands around lse.
pub const LSE_SENTINEL: f32 = 12345.0;
/// f32 sentinels before lse (148 bytes: the view is 4-byte aligned, not 16) and after
/// b*h*sq (inside the view given to the call).
pub const LSE_GUARD: usize = 37;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// q, o and the caches row-major with no gaps; the caches' buffers hold exactly
    /// `capacity` rows.
    Contiguous,
    /// q and o padded (`Placed::new(.., true)`), the caches views of larger buffers.
    Strided,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub d: usize,
    pub dtype: DType,
    pub causal: bool,
    pub b: usize,
    pub sq: usize,
    /// The caches' capacity (their seqlen).
    pub cap: usize,
    pub h: usize,
    pub hk: usize,
    /// seqlens_k, or `None` (every sequence fills its cache).
    pub lens: Option<Vec<i32>>,
    /// `KvOptions::with_splits`, or `None` (the runtime chooses).
    pub splits: Option<u32>,
    pub layout: Layout,
    pub lse: bool,
    /// A paged cache (`forward_kvcache_paged`), or `None` (contiguous caches).
    pub paged: Option<Paging>,
    /// A sliding window `(left, right)` (replacing `causal`), or `None`.
    pub window: Option<(i32, i32)>,
    /// A softcap and the softmax scale it runs with (`None`: 1 / sqrt(d)), or `None`.
    pub softcap: Option<(f32, Option<f32>)>,
    /// ALiBi: `Some(per_batch)` (slopes `[batch, heads]` when true, else `[heads]`;
    /// values from [`Case::slopes`]), or `None`.
    pub alibi: Option<bool>,
}

impl Case {
    pub fn base(d: usize, dtype: DType, causal: bool) -> Self {
        Case {
            d,
            dtype,
            causal,
            b: 1,
            sq: 1,
            cap: 64,
            h: 1,
            hk: 1,
            lens: None,
            splits: None,
            layout: Layout::Contiguous,
            lse: true,
            paged: None,
            window: None,
            softcap: None,
            alibi: None,
        }
    }

    /// ALiBi's slopes of the case (empty without ALiBi): steep for the first heads (a
    /// query sees a few keys), gentle for the last, varying by sequence when per batch.
    pub fn slopes(&self) -> Vec<f32> {
        let n = match self.alibi {
            None => 0,
            Some(true) => self.b * self.h,
            Some(false) => self.h,
        };
        (0..n)
            .map(|x| 0.8f32.powi((x % self.h) as i32) * (1.0 + 0.1 * (x / self.h) as f32))
            .collect()
    }

    /// The call's parameters: the mask (or window), the softcap and its scale.
    pub fn params(&self) -> AttnParams<'static> {
        let mut p = attn_params(self.causal, self.softcap.and_then(|s| s.1));
        if let Some((l, r)) = self.window {
            p = p.with_window(l, r);
        }
        if let Some((cap, _)) = self.softcap {
            p = p.with_softcap(cap);
        }
        p
    }

    /// The reference's modifiers and softmax scale for [`Case::params`].
    pub fn modifiers(&self) -> (Modifiers, Option<f64>) {
        let mut m = Modifiers::causal(self.causal && self.window.is_none());
        if let Some((l, r)) = self.window {
            m = m.with_window(l as i64, r as i64);
        }
        if let Some((cap, _)) = self.softcap {
            m = m.with_softcap(cap as f64);
        }
        if self.alibi.is_some() {
            m = m.with_alibi(self.slopes().iter().map(|&x| x as f64).collect());
        }
        (m, self.softcap.and_then(|s| s.1).map(f64::from))
    }

    /// Each sequence's valid keys as the kernels see them (clamped to `[0, cap]`).
    pub fn clamped_lens(&self) -> Vec<usize> {
        match &self.lens {
            Some(l) => l
                .iter()
                .map(|&x| (x.max(0) as usize).min(self.cap))
                .collect(),
            None => vec![self.cap; self.b],
        }
    }

    pub fn opts(&self) -> KvOptions {
        match self.splits {
            Some(n) => KvOptions::with_splits(n),
            None => KvOptions::new(),
        }
    }

    pub fn desc(&self, planned: Option<u32>) -> String {
        let lens = match &self.lens {
            Some(l) => format!("{l:?}").replace(' ', ""),
            None => "none".into(),
        };
        let splits = match self.splits {
            Some(n) => n.to_string(),
            None => "auto".into(),
        };
        let planned = planned.map_or("?".into(), |n| n.to_string());
        let mods = match (self.window, self.softcap, self.alibi) {
            (None, None, None) => String::new(),
            (w, s, a) => format!(" window={w:?} softcap={s:?} alibi={a:?}").replace(' ', ""),
        };
        let paged = match &self.paged {
            Some(p) => format!(" page={} shared={} spare={}", p.page, p.shared, p.spare),
            None => String::new(),
        };
        format!(
            "d={:3} {:4} {:6} b={} sq={:3} cap={:5} h={:2}/{:<2} lens={lens} splits={splits}->{planned} \
             {:10} lse={}{paged} {mods}",
            self.d,
            self.dtype.name(),
            if self.causal { "causal" } else { "full" },
            self.b,
            self.sq,
            self.cap,
            self.h,
            self.hk,
            format!("{:?}", self.layout),
            if self.lse { "y" } else { "n" },
        )
    }
}

/// The matrix's three shapes on `base` (its head dim, dtype and mask): decode (1 query,
/// GQA 32/8, sequences of 0, 1, 517 and 1000 keys, the caches views of larger buffers,
/// the runtime's split count), speculative verification (4 queries, MQA 8/1, 5 splits),
/// 16 queries MHA with a sequence shorter than the queries (causal rows see nothing) in
/// one split (no combine).
#[allow(dead_code)] // (gpu_kvcache_paged has its own shapes)
pub fn matrix_shapes(base: Case) -> [Case; 3] {
    [
        // decode, GQA 32/8: empty, one key, odd, full; views of larger buffers
        Case {
            b: 4,
            sq: 1,
            cap: 1000,
            h: 32,
            hk: 8,
            lens: Some(vec![0, 1, 517, 1000]),
            layout: Layout::Strided,
            ..base.clone()
        },
        // speculative verification, MQA 8/1, 5 splits
        Case {
            b: 2,
            sq: 4,
            cap: 777,
            h: 8,
            hk: 1,
            lens: Some(vec![777, 5]),
            splits: Some(5),
            ..base.clone()
        },
        // 16 queries, MHA, a sequence shorter than the queries, one split
        Case {
            b: 2,
            sq: 16,
            cap: 333,
            h: 4,
            hk: 4,
            lens: Some(vec![333, 7]),
            splits: Some(1),
            layout: Layout::Strided,
            ..base
        },
    ]
}

/// The split count the runtime plans for the case (what the case line reports).
pub fn planned_splits(rt: &FlashAttention, c: &Case) -> Result<u32, Box<dyn Error>> {
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.cap, c.hk, c.d]);
    let params = c.params();
    let opts = c.opts();
    if let Some(p) = &c.paged {
        let pool = [c.b * c.cap / p.page + p.spare, p.page, c.hk, c.d];
        let shapes = (pool, [c.b, c.cap / p.page]);
        return Ok(match c.dtype {
            DType::F16 => rt.kvcache_paged_splits::<half::f16>(qs, shapes, &params, &opts)?,
            DType::Bf16 => rt.kvcache_paged_splits::<half::bf16>(qs, shapes, &params, &opts)?,
        });
    }
    Ok(match c.dtype {
        DType::F16 => rt.kvcache_splits::<half::f16>(qs, ks, &params, &opts)?,
        DType::Bf16 => rt.kvcache_splits::<half::bf16>(qs, ks, &params, &opts)?,
    })
}

/// Where a `[b, cap, hk, d]` cache sits in its buffer, and the buffer's length.
pub fn cache_place(c: &Case) -> (Placed, usize) {
    let (b, cap, hk, d) = (c.b, c.cap, c.hk, c.d);
    let shape = [b, cap, hk, d];
    match c.layout {
        Layout::Contiguous => (Placed::new(shape, false), (b * cap * hk * d).max(8)),
        Layout::Strided => {
            // room for 7 more rows and 3 more heads, head stride d + 8; the view starts
            // at row 2, head 1 (a cache of more layers or sequences than this call's)
            let (rows, heads, ds) = (cap + 7, hk + 3, d + 8);
            let p = Placed {
                shape,
                strides: [rows * heads * ds, heads * ds, ds, 1],
                offset: (2 * heads + 1) * ds,
            };
            (p, b * rows * heads * ds)
        }
    }
}

/// Runs `cases`, one line each, then a summary line; panics listing the failures.
pub fn run_group(group: &str, cases: &[Case]) {
    let rt = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"));
    let stream = rt.context().default_stream();
    let start = Instant::now();
    let (mut failures, mut worst) = (Vec::new(), [0.0f64; 2]);
    for (i, c) in cases.iter().enumerate() {
        let seed = 0x6b76_c4c3 ^ ((group.len() as u64) << 40) ^ ((i as u64) << 20);
        let planned = planned_splits(&rt, c);
        let desc = format!("{group} {}", c.desc(planned.as_ref().ok().copied()));
        let res = planned.and_then(|_| match c.dtype {
            DType::F16 => run_case::<half::f16>(&rt, &stream, c, seed),
            DType::Bf16 => run_case::<half::bf16>(&rt, &stream, c, seed),
        });
        report_case(&desc, c.dtype, res, &mut worst, &mut failures);
    }
    println!(
        "\n{group}: {} cases in {:.1}s, {} failed; worst o rel-L2: f16 {:.2e}, bf16 {:.2e}",
        cases.len(),
        start.elapsed().as_secs_f64(),
        failures.len(),
        worst[0],
        worst[1]
    );
    assert!(
        failures.is_empty(),
        "{group}: {} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
