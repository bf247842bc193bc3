//! `bench_bwd`'s rows: the sweep's filters (`Sweep`) plus the tokens per row, the (heads,
//! heads_k) pairs of grouped-query rows and the grouped-query backward's split counts.
//! Included by `bench_bwd` alone (`#[path]`), not through `bench_common`.
//!
//! Env: BENCH_TOKENS (default 16384: batch = tokens / seqlen), BENCH_HEADS (comma list of
//! `h/hk` pairs, e.g. `32/32,32/8,28/4`; unset: the paper's heads = 2048 / d, heads_k =
//! heads), BENCH_SPLITS (comma list; 0 = automatic, n > 0 = `with_group_splits(n)`;
//! default 0; a row without GQA ignores it and runs once, recorded as 0), BENCH_TILING
//! (the main pass's row, fixed: `tiling_from_env`).

use flash_runtime::BwdOptions;

use crate::bench_common::{HIDDEN, Sweep, TOKENS, env_list};

/// The rows' tokens, heads and splits.
pub struct BwdRows {
    pub tokens: usize,
    /// BENCH_HEADS' (h, hk) pairs; `None`: the paper's setup.
    pub heads: Option<Vec<(usize, usize)>>,
    pub splits: Vec<u32>,
}

/// One row: q, dO, o, dq `[b, n, h, d]`, k, v, dk, dv `[b, n, hk, d]`, group split `s`.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub d: usize,
    pub causal: bool,
    pub n: usize,
    pub b: usize,
    pub h: usize,
    pub hk: usize,
    pub s: u32,
}

impl Row {
    /// The backward's FLOPs: 2.5 x the forward's 4 b h n^2 d (query heads), half if causal.
    pub fn flops(&self) -> f64 {
        let f = 4.0 * (self.b * self.h * self.n * self.n * self.d) as f64;
        2.5 * if self.causal { f / 2.0 } else { f }
    }

    pub fn q_shape(&self) -> [usize; 4] {
        [self.b, self.n, self.h, self.d]
    }

    pub fn kv_shape(&self) -> [usize; 4] {
        [self.b, self.n, self.hk, self.d]
    }
}

impl BwdRows {
    /// The rows the environment asks for.
    pub fn from_env() -> Result<Self, String> {
        let heads = match std::env::var("BENCH_HEADS") {
            Ok(s) if !s.trim().is_empty() => Some(parse_heads(&s)?),
            _ => None,
        };
        let splits = match std::env::var("BENCH_SPLITS") {
            Ok(s) if !s.trim().is_empty() => s
                .split(',')
                .map(|x| x.trim().parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("BENCH_SPLITS `{s}`: {e}"))?,
            _ => vec![0],
        };
        let tokens = env_list("BENCH_TOKENS", &[TOKENS]).first().copied();
        Ok(BwdRows {
            tokens: tokens.unwrap_or(TOKENS),
            heads,
            splits,
        })
    }

    /// The (heads, heads_k) pairs of head dim `d`.
    fn heads(&self, d: usize) -> Vec<(usize, usize)> {
        match &self.heads {
            Some(v) => v.clone(),
            None => vec![(HIDDEN / d.max(1), HIDDEN / d.max(1))],
        }
    }

    /// The rows of `sw` in order: d, causal, seqlen, heads, splits.
    pub fn rows(&self, sw: &Sweep) -> Vec<Row> {
        let mut rows = Vec::new();
        for &d in &sw.dims {
            for &causal in &sw.causal {
                for &n in &sw.seqs {
                    for (h, hk) in self.heads(d) {
                        let gqa = hk > 0 && hk < h;
                        for &s in if gqa { &self.splits[..] } else { &[0] } {
                            let b = self.tokens / n.max(1);
                            rows.push(Row {
                                d,
                                causal,
                                n,
                                b,
                                h,
                                hk,
                                s,
                            });
                        }
                    }
                }
            }
        }
        rows
    }

    /// Why `r` cannot run, if it cannot.
    pub fn invalid(&self, r: &Row) -> Option<String> {
        let (t, n, d) = (self.tokens, r.n, r.d);
        let bad = n == 0 || d == 0 || !t.is_multiple_of(n);
        match self.heads {
            None if bad || !HIDDEN.is_multiple_of(d) => {
                Some(format!("seqlen must divide {t} and d must divide {HIDDEN}"))
            }
            Some(_) if bad || r.hk == 0 || !r.h.is_multiple_of(r.hk) => Some(format!(
                "seqlen must divide {t} and heads_k must divide heads"
            )),
            _ => None,
        }
    }

    /// Buffer elements the largest of `rows` needs: (q-like, k-like, f32 lse).
    pub fn sizes(&self, rows: &[Row]) -> (usize, usize, usize) {
        let (mut q, mut kv, mut lse) = (1, 1, 1);
        for r in rows.iter().filter(|r| self.invalid(r).is_none()) {
            let l = |s: [usize; 4]| s.iter().product::<usize>();
            (q, kv, lse) = (
                q.max(l(r.q_shape())),
                kv.max(l(r.kv_shape())),
                lse.max(r.b * r.h * r.n),
            );
        }
        (q, kv, lse)
    }

    /// The grouped-query columns (heads_k, split) of a row, or of the header (`None`).
    pub fn cols(&self, r: Option<&Row>) -> String {
        match (&self.heads, r) {
            (None, _) => String::new(),
            (Some(_), None) => format!(" {:>4} {:>5}", "hk", "split"),
            (Some(_), Some(r)) => format!(" {:4} {:5}", r.hk, r.s),
        }
    }

    /// The setup, for the header line.
    pub fn describe(&self) -> String {
        match &self.heads {
            None => format!("{} tokens, hidden {HIDDEN}", self.tokens),
            Some(h) => {
                let hs: Vec<String> = h.iter().map(|(h, hk)| format!("{h}/{hk}")).collect();
                let s = &self.splits;
                format!(
                    "{} tokens, heads {}, group splits {s:?} (0: auto)",
                    self.tokens,
                    hs.join(",")
                )
            }
        }
    }
}

/// BENCH_TILING (`standard`, `long`, `compact`, `wide`, `prefill`): the main pass's row,
/// fixed (`BwdOptions::with_tiling`); unset or `auto`: the runtime's choice.
pub fn tiling_from_env() -> Result<Option<flash_runtime::flash_codegen::Tiling>, String> {
    crate::bench_common::tiling_env("BENCH_TILING")
}

/// `base` (the library's default or deterministic mode) with the split `s` (0: automatic).
pub fn with_splits(base: BwdOptions, s: u32) -> BwdOptions {
    if s == 0 {
        base
    } else {
        base.with_group_splits(s)
    }
}

fn parse_heads(s: &str) -> Result<Vec<(usize, usize)>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|p| {
            let (h, hk) = p.trim().split_once('/').unwrap_or((p.trim(), p.trim()));
            match (h.trim().parse(), hk.trim().parse()) {
                (Ok(h), Ok(hk)) => Ok((h, hk)),
                _ => Err(format!("BENCH_HEADS: `{p}` is not `heads/heads_k`")),
            }
        })
        .collect()
}
