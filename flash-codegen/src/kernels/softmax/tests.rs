//! The fixed reference's range, on a model of the kernels' arithmetic in f32: every
//! probability of a bounded score stays a normal, finite f32 and bf16, and a row's
//! softmax matches float64's, for caps up to the limit `fixed_fits` sets.

use super::{FIXED_HIGH, FIXED_LOW};

/// f32 `x` rounded to bf16 (to nearest even), back in f32.
fn bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let round = 0x7fff + ((b >> 16) & 1);
    f32::from_bits((b + round) & 0xffff_0000)
}

/// The kernel's steps for one row of transformed scores `t` (in [-1, 1]) under cap `cap`:
/// `c = cap log2 e`, `r = max(0, c - FIXED_HIGH)`, `p = bf16(2^(t c - r))` (flushed to 0
/// below 2^-126, as `ex2.approx.ftz`), the sum in f32; returns (p / sum, the LSE) next
/// to float64's.
fn row(cap: f32, t: &[f32]) -> (Vec<f32>, f32, Vec<f64>, f64) {
    let c = cap * std::f32::consts::LOG2_E;
    let r = (c - FIXED_HIGH).max(0.0);
    let p: Vec<f32> = t
        .iter()
        .map(|&t| {
            let x = t.mul_add(c, -r).exp2();
            bf16(if x < f32::MIN_POSITIVE { 0.0 } else { x })
        })
        .collect();
    for &x in &p {
        let (lo, hi) = ((-FIXED_LOW).exp2(), FIXED_HIGH.exp2());
        assert!(x.is_normal() && x >= lo && x <= hi, "cap {cap}: p = {x:e}");
    }
    let sum: f32 = p.iter().sum();
    let lse = (r + sum.log2()) * std::f32::consts::LN_2;
    let s64: Vec<f64> = t.iter().map(|&t| f64::from(cap) * f64::from(t)).collect();
    let m = s64.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = s64.iter().map(|s| (s - m).exp()).sum();
    let want = s64.iter().map(|s| (s - m).exp() / z).collect();
    (p.iter().map(|p| p / sum).collect(), lse, want, m + z.ln())
}

/// The limit `fixed_fits` tests, `(FIXED_HIGH + FIXED_LOW) / 2` in `cap log2 e`, is where
/// the lowest probability, `2^(-c - r)`, reaches `2^-FIXED_LOW`; below it every
/// probability of a row (all of its scores at -cap, all at +cap, or spread) is a normal
/// f32, at most `2^FIXED_HIGH`, and the row's softmax and LSE match float64's within
/// bf16's rounding of P.
#[test]
fn bounded_scores_keep_their_probabilities_in_range() {
    let limit = (FIXED_HIGH + FIXED_LOW) / 2.0;
    assert_eq!(-limit - (limit - FIXED_HIGH), -FIXED_LOW);
    let top = limit / std::f32::consts::LOG2_E; // the largest cap served (56.8)
    let n = 4096;
    let spread: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32) * 2.0 - 1.0).collect();
    let rows: [Vec<f32>; 4] = [
        vec![-1.0; n],
        vec![1.0; n],
        spread.clone(),
        spread.iter().map(|t| t * 0.01 - 0.99).collect(),
    ];
    for cap in [0.7, 5.0, 30.0, 50.0, top * 0.999] {
        for t in &rows {
            let (p, lse, want, lse64) = row(cap, t);
            let err = p
                .iter()
                .zip(&want)
                .map(|(&p, &w)| (f64::from(p) - w).abs())
                .fold(0.0f64, f64::max);
            let pmax = want.iter().cloned().fold(0.0f64, f64::max);
            assert!(err <= 8e-3 * pmax, "cap {cap}: error {err:e} of {pmax:e}");
            assert!(
                (f64::from(lse) - lse64).abs() < 1e-3 * lse64.abs().max(1.0),
                "cap {cap}"
            );
        }
    }
}
