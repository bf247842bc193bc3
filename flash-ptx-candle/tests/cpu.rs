//! CPU tests (no GPU, no CUDA): `flash_attn` on CPU tensors (its candle-ops path, forward
//! and autograd) against flash-runtime's float64 reference with every modifier, and
//! every check's error. The GPU tests (tests/gpu.rs) compare the kernels with the same
//! candle-ops path.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::{flat, modifiers, randn};
use flash_ptx_candle::{FlashParams, compat, flash_attn};
use flash_runtime::reference::{Shape, attention_backward_with, attention_forward_with, rel_l2};

/// (b, sq, sk, h, hk, d)
type Dims = (usize, usize, usize, usize, usize, usize);

/// Forward and gradients of `sum(o * do)` from `flash_attn` (CPU: candle's ops, autograd)
/// against the float64 reference.
fn check(dims: Dims, p: FlashParams, slopes: Option<Vec<f32>>, what: &str) {
    let (b, sq, sk, h, hk, d) = dims;
    let q = Var::from_tensor(&randn((b, sq, h, d), 1)).unwrap();
    let k = Var::from_tensor(&randn((b, sk, hk, d), 2)).unwrap();
    let v = Var::from_tensor(&randn((b, sk, hk, d), 3)).unwrap();
    let d_o = randn((b, sq, h, d), 4);
    let p = match &slopes {
        Some(s) => {
            let t = match s.len() == h {
                true => Tensor::from_vec(s.clone(), h, &Device::Cpu).unwrap(),
                false => Tensor::from_vec(s.clone(), (b, h), &Device::Cpu).unwrap(),
            };
            p.with_alibi(t)
        }
        None => p,
    };
    let o = flash_attn(q.as_tensor(), k.as_tensor(), v.as_tensor(), &p).unwrap();
    assert_eq!(o.dims(), [b, sq, h, d]);
    let loss = (&o * &d_o).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let shape = Shape::new(b, sq, sk, h, hk, d);
    let mods = modifiers(&p, slopes.as_deref());
    let scale = p.softmax_scale.map(f64::from);
    let (qh, kh, vh, doh) = (flat(&q), flat(&k), flat(&v), flat(&d_o));
    let want = attention_forward_with(&shape, &qh, &kh, &vh, &mods, scale).unwrap();
    let err = rel_l2(&flat(&o), &want.o);
    assert!(err < 1e-5, "{what}: o rel L2 {err:.2e}");
    let g = attention_backward_with(&shape, &qh, &kh, &vh, &doh, &mods, scale).unwrap();
    for (name, var, want) in [("dq", &q, &g.dq), ("dk", &k, &g.dk), ("dv", &v, &g.dv)] {
        let got = flat(grads.get(var.as_tensor()).unwrap());
        let err = rel_l2(&got, want);
        let tol = if want.iter().all(|&x| x == 0.0) {
            0.0
        } else {
            1e-4
        };
        assert!(
            err <= tol || (tol == 0.0 && got.iter().all(|&x| x == 0.0)),
            "{what}: {name} rel L2 {err:.2e}"
        );
    }
    println!("{what}: ok");
}

#[test]
fn matches_the_float64_reference() {
    let sq_ne_sk = [
        (2, 7, 19, 4, 2, 16),
        (1, 19, 7, 4, 4, 8),
        (2, 33, 33, 6, 1, 32),
    ];
    for dims in sq_ne_sk {
        check(dims, FlashParams::new(), None, &format!("{dims:?} plain"));
        check(
            dims,
            FlashParams::causal(),
            None,
            &format!("{dims:?} causal"),
        );
        check(
            dims,
            FlashParams::new().with_scale(0.3),
            None,
            &format!("{dims:?} scale"),
        );
        let w = FlashParams::new().with_window(Some(3), Some(0));
        check(dims, w, None, &format!("{dims:?} window (3, 0)"));
        let w = FlashParams::new().with_window(Some(2), Some(5));
        check(dims, w, None, &format!("{dims:?} window (2, 5)"));
        let w = FlashParams::new().with_window(None, Some(2));
        check(dims, w, None, &format!("{dims:?} window (-, 2)"));
        let w = FlashParams::causal().with_window(Some(4), Some(9)); // causal: right = 0
        check(dims, w, None, &format!("{dims:?} causal window 4"));
        let c = FlashParams::causal().with_softcap(2.0);
        check(dims, c, None, &format!("{dims:?} causal softcap"));
        let (b, _, _, h, _, _) = dims;
        let per_head: Vec<f32> = (0..h).map(|i| 0.5f32.powi(i as i32 + 1)).collect();
        check(
            dims,
            FlashParams::causal(),
            Some(per_head.clone()),
            &format!("{dims:?} alibi [h]"),
        );
        let per_bh: Vec<f32> = (0..b * h).map(|i| 0.3 + 0.1 * i as f32).collect();
        check(
            dims,
            FlashParams::new(),
            Some(per_bh),
            &format!("{dims:?} alibi [b, h]"),
        );
    }
}

#[test]
fn compat_entry_points_match_flash_attn() {
    let (q, k, v) = (
        randn((1, 9, 2, 8), 5),
        randn((1, 9, 2, 8), 6),
        randn((1, 9, 2, 8), 7),
    );
    let same = |a: &Tensor, b: &Tensor| assert_eq!(flat(a), flat(b));
    let p = FlashParams::causal().with_scale(0.25);
    same(
        &compat::flash_attn(&q, &k, &v, 0.25, true).unwrap(),
        &flash_attn(&q, &k, &v, &p).unwrap(),
    );
    let p = FlashParams::new()
        .with_scale(0.25)
        .with_window(Some(2), Some(0));
    let got = compat::flash_attn_windowed(&q, &k, &v, 0.25, Some(2), Some(0)).unwrap();
    same(&got, &flash_attn(&q, &k, &v, &p).unwrap());
    let slopes = Tensor::new(&[0.5f32, 0.25], &Device::Cpu).unwrap();
    let p = FlashParams::causal()
        .with_scale(0.25)
        .with_alibi(slopes.clone());
    let got = compat::flash_attn_alibi(&q, &k, &v, &slopes, 0.25, true).unwrap();
    same(&got, &flash_attn(&q, &k, &v, &p).unwrap());
    // softcap 0.0 is none, as in FlashAttention-2
    let got = compat::flash_attn_alibi_windowed_softcap(&q, &k, &v, None, 0.25, None, Some(0), 0.0);
    same(
        &got.unwrap(),
        &compat::flash_attn(&q, &k, &v, 0.25, true).unwrap(),
    );
    let p = FlashParams::causal().with_scale(0.25).with_softcap(3.0);
    let got = compat::flash_attn_alibi_windowed_softcap(&q, &k, &v, None, 0.25, None, Some(0), 3.0);
    same(&got.unwrap(), &flash_attn(&q, &k, &v, &p).unwrap());
}

#[test]
fn strided_and_broadcast_inputs() {
    // q from a [b, h, s, d] tensor transposed, k broadcast over the batch
    let qt = randn((2, 3, 11, 16), 8); // [b, h, s, d]
    let q = qt.transpose(1, 2).unwrap();
    let k1 = randn((1, 11, 3, 16), 9);
    let k = k1.broadcast_as((2, 11, 3, 16)).unwrap();
    let v = randn((2, 11, 3, 16), 10);
    let p = FlashParams::causal();
    let got = flash_attn(&q, &k, &v, &p).unwrap();
    let want = flash_attn(&q.contiguous().unwrap(), &k.contiguous().unwrap(), &v, &p).unwrap();
    assert_eq!(flat(&got), flat(&want));
}

#[test]
fn half_dtypes_come_back_in_their_dtype() {
    for dt in [DType::F16, DType::BF16] {
        let q = randn((1, 5, 2, 8), 11).to_dtype(dt).unwrap();
        let o = flash_attn(&q, &q, &q, &FlashParams::causal()).unwrap();
        assert_eq!(o.dtype(), dt);
    }
}

/// Each bad input fails with a message naming what to change.
#[test]
fn bad_inputs_are_errors_with_messages() {
    let q = randn((1, 4, 4, 8), 12);
    let k = randn((1, 6, 2, 8), 13);
    let msg = |r: candle_core::Result<Tensor>| format!("{}", r.unwrap_err());
    let p = FlashParams::new();
    let cases: Vec<(String, &str)> = vec![
        (
            msg(flash_attn(&q.flatten_to(1).unwrap(), &k, &k, &p)),
            "expected rank 4",
        ),
        (
            msg(flash_attn(&q, &k.to_dtype(DType::F16).unwrap(), &k, &p)),
            "dtypes differ",
        ),
        (
            msg(flash_attn(
                &q.to_dtype(DType::U32).unwrap(),
                &k.to_dtype(DType::U32).unwrap(),
                &k.to_dtype(DType::U32).unwrap(),
                &p,
            )),
            "f16 or bf16",
        ),
        (
            msg(flash_attn(&q, &k, &randn((1, 5, 2, 8), 1), &p)),
            "differ in shape",
        ),
        (
            msg(flash_attn(
                &q,
                &randn((2, 6, 2, 8), 1),
                &randn((2, 6, 2, 8), 1),
                &p,
            )),
            "batch and head_dim",
        ),
        (
            msg(flash_attn(
                &q,
                &randn((1, 6, 3, 8), 1),
                &randn((1, 6, 3, 8), 1),
                &p,
            )),
            "multiple of the kv heads",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_softcap(0.0),
            )),
            "finite and > 0",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_softcap(f32::NAN),
            )),
            "finite and > 0",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_scale(f32::INFINITY),
            )),
            "not finite",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_window(Some(1 << 40), None),
            )),
            "out of range",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_alibi(Tensor::new(&[1f32, 2.], &Device::Cpu).unwrap()),
            )),
            "expected [4] (per head) or [1, 4]",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new().with_alibi(Tensor::new(&[1f64; 4], &Device::Cpu).unwrap()),
            )),
            "expected f32",
        ),
        (
            msg(flash_attn(
                &q,
                &k,
                &k,
                &FlashParams::new()
                    .with_softcap(5.0)
                    .with_alibi(Tensor::new(&[1f32; 4], &Device::Cpu).unwrap()),
            )),
            "softcap and ALiBi",
        ),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "{got:?} should say {want:?}");
        assert!(got.contains("flash-ptx"), "{got:?} should name flash-ptx");
    }
}

/// A query that sees no key (causal with sq > sk) gets zeros and zero gradients.
#[test]
fn rows_without_keys_are_zero() {
    let q = Var::from_tensor(&randn((1, 6, 1, 8), 14)).unwrap();
    let (k, v) = (
        randn((1, 2, 1, 8), 15),
        Var::from_tensor(&randn((1, 2, 1, 8), 16)).unwrap(),
    );
    let o = flash_attn(q.as_tensor(), &k, v.as_tensor(), &FlashParams::causal()).unwrap();
    let rows = o
        .squeeze(0)
        .unwrap()
        .squeeze(1)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    for r in &rows[..4] {
        assert!(r.iter().all(|&x| x == 0.0), "{r:?}");
    }
    assert!(rows[5].iter().any(|&x| x != 0.0));
    let g = o.sum_all().unwrap().backward().unwrap();
    for (name, var) in [("dq", &q), ("dv", &v)] {
        let grad = flat(g.get(var.as_tensor()).unwrap());
        assert!(grad.iter().all(|x| x.is_finite()), "{name}: {grad:?}");
    }
    // the rows without keys add nothing to dq
    let dq = flat(g.get(q.as_tensor()).unwrap());
    assert!(dq[..4 * 8].iter().all(|&x| x == 0.0), "{dq:?}");
}
