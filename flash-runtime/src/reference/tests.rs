//! Host tests of the float64 reference (runtime layer).

use super::*;

pub(crate) fn shape(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize) -> Shape {
    Shape::new(b, sq, sk, h, hk, d)
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift), for the reference tests.
pub(super) fn pseudo(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn uniform_keys_give_mean_of_v() {
    let s = shape(1, 3, 5, 1, 1, 8);
    let q = pseudo(s.q_len(), 1);
    let k = vec![0.25; s.kv_len()]; // all keys equal -> uniform softmax
    let v = pseudo(s.kv_len(), 2);
    let r = attention_forward(&s, &q, &k, &v, false, None).unwrap();
    for i in 0..3 {
        for c in 0..8 {
            let mean: f64 = (0..5).map(|j| v[j * 8 + c]).sum::<f64>() / 5.0;
            assert!((r.o[i * 8 + c] - mean).abs() < 1e-12);
        }
        let score: f64 = q[i * 8..i * 8 + 8].iter().sum::<f64>() * 0.25 / 8f64.sqrt();
        assert!((r.lse[i] - (score + 5f64.ln())).abs() < 1e-12);
    }
}

#[test]
fn causal_first_row_sees_only_key_zero() {
    let s = shape(2, 4, 4, 2, 2, 8);
    let (q, k, v) = (
        pseudo(s.q_len(), 3),
        pseudo(s.kv_len(), 4),
        pseudo(s.kv_len(), 5),
    );
    let r = attention_forward(&s, &q, &k, &v, true, Some(0.7)).unwrap();
    for (bi, hi) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let o = ((bi * 4) * 2 + hi) * 8;
        let kv = ((bi * 4) * 2 + hi) * 8;
        assert_eq!(&r.o[o..o + 8], &v[kv..kv + 8]);
        let dot: f64 = (0..8).map(|c| q[o + c] * k[kv + c]).sum();
        assert!((r.lse[(bi * 2 + hi) * 4] - dot * 0.7).abs() < 1e-12);
    }
    // the last row sees every key: same as non-causal
    let nc = attention_forward(&s, &q, &k, &v, false, Some(0.7)).unwrap();
    let last = ((4 + 3) * 2 + 1) * 8; // batch 1, row 3, head 1
    assert_eq!(&r.o[last..last + 8], &nc.o[last..last + 8]);
}

#[test]
fn fully_masked_rows_are_zero_and_neg_inf() {
    // sq > sk, causal, bottom-right: rows i < sq - sk see nothing.
    let s = shape(1, 6, 2, 1, 1, 8);
    let (q, k, v) = (
        pseudo(s.q_len(), 6),
        pseudo(s.kv_len(), 7),
        pseudo(s.kv_len(), 8),
    );
    let r = attention_forward(&s, &q, &k, &v, true, None).unwrap();
    for i in 0..6 {
        let row = &r.o[i * 8..i * 8 + 8];
        if i < 4 {
            assert!(row.iter().all(|&x| x == 0.0) && r.lse[i] == f64::NEG_INFINITY);
        } else {
            assert!(row.iter().any(|&x| x != 0.0) && r.lse[i].is_finite());
        }
    }
    assert_eq!(r.o[4 * 8..5 * 8], v[0..8]); // row 4 sees key 0 only
    // seqlen_k = 0: everything masked
    let s0 = shape(1, 3, 0, 2, 1, 8);
    let r0 = attention_forward(&s0, &pseudo(s0.q_len(), 9), &[], &[], false, None).unwrap();
    assert!(r0.o.iter().all(|&x| x == 0.0));
    assert!(r0.lse.iter().all(|&x| x == f64::NEG_INFINITY));
}

#[test]
fn gqa_shares_kv_heads() {
    // 4 query heads on 2 kv heads == 4 heads with kv heads duplicated.
    let s = shape(1, 33, 40, 4, 2, 16);
    let (q, k, v) = (
        pseudo(s.q_len(), 10),
        pseudo(s.kv_len(), 11),
        pseudo(s.kv_len(), 12),
    );
    let dup = |x: &[f64]| -> Vec<f64> {
        x.chunks(16)
            .flat_map(|c| [c, c])
            .flatten()
            .copied()
            .collect()
    };
    let s4 = Shape { heads_k: 4, ..s };
    for causal in [false, true] {
        let a = attention_forward(&s, &q, &k, &v, causal, None).unwrap();
        let b = attention_forward(&s4, &q, &dup(&k), &dup(&v), causal, None).unwrap();
        assert!(rel_l2(&a.o, &b.o) < 1e-15 && rel_l2(&a.lse, &b.lse) < 1e-15);
    }
}

#[test]
fn bad_inputs_are_errors() {
    let s = shape(1, 2, 2, 3, 2, 8);
    let x = vec![0f32; 48];
    assert!(matches!(
        attention_forward(&s, &x, &x[..32], &x[..32], false, None),
        Err(FlashError::HeadsNotDivisible { .. })
    ));
    assert!(attention_forward(&s, &x[..1], &x, &x, false, None).is_err());
}

#[test]
fn rel_l2_handles_infinities() {
    let inf = f64::NEG_INFINITY;
    assert_eq!(rel_l2(&[3.0, inf], &[4.0, inf]), 0.25);
    assert_eq!(rel_l2(&[1.0], &[0.0]), 1.0);
    assert_eq!(rel_l2(&[1.0f32, 2.0], &[1.0f64, 2.0]), 0.0);
    assert!(rel_l2(&[f64::NAN], &[1.0]).is_nan());
    assert!(rel_l2(&[0.0, 1.0], &[inf, 1.0]).is_infinite());
}
