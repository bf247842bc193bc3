//! The score rule of the float64 reference: the mask (causal or a sliding window) and the
//! score transforms (softcap, ALiBi), with FA2's semantics (docs/modifiers.md). For query
//! `i` and key `j` with `a = seqlen_k - seqlen_q`: the raw score `x = scale * q.k`, then
//! `s = cap * tanh(x / cap)` under softcap, then `s -= slope * |i + a - j|` under ALiBi;
//! key `j` is visible iff `i + a - left <= j <= i + a + right` (a bound of -1 is
//! unbounded; causal is `(-1, 0)`).

/// What one attention call computes beyond plain softmax attention.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Modifiers {
    /// Bottom-right causal mask (the window `(-1, 0)`).
    pub causal: bool,
    /// Sliding window `(left, right)`; -1 = unbounded on that side.
    pub window: Option<(i64, i64)>,
    /// Softcap `cap > 0`: `s = cap * tanh(x / cap)`.
    pub softcap: Option<f64>,
    /// ALiBi slopes, `[heads]` or `[batch, heads]` (row-major).
    pub alibi: Option<Vec<f64>>,
}

impl Modifiers {
    /// Plain attention, causal or not.
    pub fn causal(causal: bool) -> Self {
        Modifiers {
            causal,
            ..Self::default()
        }
    }

    /// With the sliding window `(left, right)`.
    pub fn with_window(self, left: i64, right: i64) -> Self {
        Modifiers {
            window: Some((left, right)),
            ..self
        }
    }

    /// With softcap `cap`.
    pub fn with_softcap(self, cap: f64) -> Self {
        Modifiers {
            softcap: Some(cap),
            ..self
        }
    }

    /// With ALiBi `slopes` (`[heads]` or `[batch, heads]`).
    pub fn with_alibi(self, slopes: Vec<f64>) -> Self {
        Modifiers {
            alibi: Some(slopes),
            ..self
        }
    }

    /// The rule of sequence `b` alone (a batch-1 problem): ALiBi slopes `[batch, heads]`
    /// reduced to that sequence's `[heads]` row; the rest unchanged.
    pub fn for_sequence(&self, b: usize, heads: usize) -> Modifiers {
        let alibi = self.alibi.as_ref().map(|s| match s.len() == heads {
            true => s.clone(),
            false => s[b * heads..(b + 1) * heads].to_vec(),
        });
        Modifiers {
            alibi,
            ..self.clone()
        }
    }

    /// The visible keys of query `i`, `first..=last`, or `None` when it sees none.
    pub fn keys(&self, i: usize, seqlen_q: usize, seqlen_k: usize) -> Option<(usize, usize)> {
        let diag = i as i64 + seqlen_k as i64 - seqlen_q as i64;
        let (mut lo, mut hi) = (0i64, seqlen_k as i64 - 1);
        if self.causal {
            hi = hi.min(diag);
        }
        if let Some((left, right)) = self.window {
            if left >= 0 {
                lo = lo.max(diag - left);
            }
            if right >= 0 {
                hi = hi.min(diag + right);
            }
        }
        (lo <= hi).then_some((lo as usize, hi as usize))
    }

    /// Whether query `i` sees key `j`.
    pub fn visible(&self, i: usize, j: usize, seqlen_q: usize, seqlen_k: usize) -> bool {
        self.keys(i, seqlen_q, seqlen_k)
            .is_some_and(|(lo, hi)| (lo..=hi).contains(&j))
    }

    /// The score of raw score `x` (already times the softmax scale) at query `i`, key `j`
    /// of head `hi` (of `heads`) in batch `bi`.
    pub fn score(
        &self,
        x: f64,
        (i, j): (usize, usize),
        (bi, hi, heads): (usize, usize, usize),
        (sq, sk): (usize, usize),
    ) -> f64 {
        let mut s = match self.softcap {
            Some(cap) => cap * (x / cap).tanh(),
            None => x,
        };
        if let Some(slopes) = &self.alibi {
            let slope = match slopes.len() == heads {
                true => slopes[hi],
                false => slopes[bi * heads + hi],
            };
            let dist = (i as i64 + sk as i64 - sq as i64 - j as i64).abs();
            s -= slope * dist as f64;
        }
        s
    }

    /// `ds/dx` at raw score `x`: `1 - tanh^2(x / cap)` under softcap, else 1 (the bias
    /// and the mask are constants).
    pub fn dscore(&self, x: f64) -> f64 {
        match self.softcap {
            Some(cap) => {
                let t = (x / cap).tanh();
                1.0 - t * t
            }
            None => 1.0,
        }
    }
}
