//! GPU tests (`--features gpu`, an NVIDIA GPU): `flash_attn` on CUDA tensors (flash-ptx's
//! kernels, forward and backward through candle's autograd) against candle's own
//! matmul-softmax attention in f32 ([`reference::attention`]) on the same rounded inputs.
//! Both dtypes, head dims 64/128 (and 32, 96, 256), GQA and MQA, causal, windows,
//! softcap, ALiBi, sq != sk, strided inputs, the deterministic mode, typed errors.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::gpu::{dev, randn, rel_l2, vars};
use flash_ptx_candle::{FlashParams, flash_attn, reference};

/// (b, sq, sk, h, hk, d)
type Dims = (usize, usize, usize, usize, usize, usize);

/// Forward and the gradients of `sum(o * do)`: ours (inputs in `dt`) against the f32
/// candle-ops reference of the same (rounded) inputs; returns the worst rel L2.
fn check(dims: Dims, dt: DType, p: &FlashParams, what: &str) -> f64 {
    let (b, sq, sk, h, hk, d) = dims;
    let dev = dev();
    let (q, k, v) = (
        randn(&dev, (b, sq, h, d), dt),
        randn(&dev, (b, sk, hk, d), dt),
        randn(&dev, (b, sk, hk, d), dt),
    );
    let d_o = randn(&dev, (b, sq, h, d), dt);
    let run = |x: [&Tensor; 3], dtype: DType, ours: bool| {
        let vars = vars(x, dtype);
        let (q, k, v) = (
            vars[0].as_tensor(),
            vars[1].as_tensor(),
            vars[2].as_tensor(),
        );
        let o = match ours {
            true => flash_attn(q, k, v, p).unwrap(),
            false => reference::attention(q, k, v, p).unwrap(),
        };
        let loss = (o.to_dtype(DType::F32).unwrap() * d_o.to_dtype(DType::F32).unwrap())
            .unwrap()
            .sum_all()
            .unwrap();
        let g = loss.backward().unwrap();
        let grads: Vec<Tensor> = vars
            .iter()
            .map(|x| g.get(x.as_tensor()).unwrap().clone())
            .collect();
        (o, grads)
    };
    let (o, g) = run([&q, &k, &v], dt, true);
    let (o_ref, g_ref) = run([&q, &k, &v], DType::F32, false);
    assert_eq!(o.dtype(), dt);
    assert_eq!(o.dims(), [b, sq, h, d]);
    let tol = match dt {
        DType::BF16 => 1.6e-2,
        _ => 2.5e-3,
    };
    let mut worst = 0f64;
    for (name, got, want) in [
        ("o", &o, &o_ref),
        ("dq", &g[0], &g_ref[0]),
        ("dk", &g[1], &g_ref[1]),
        ("dv", &g[2], &g_ref[2]),
    ] {
        assert_eq!(got.dims(), want.dims(), "{what}: {name} shape");
        let e = rel_l2(got, want);
        let nan = |t: &Tensor| {
            let x = t.to_dtype(DType::F32).unwrap().sum_all().unwrap();
            !x.to_scalar::<f32>().unwrap().is_finite()
        };
        assert!(!nan(want), "{what}: {name}: the reference is not finite");
        assert!(!nan(got), "{what}: {name}: flash-ptx's is not finite");
        assert!(
            e.is_finite() && e < tol,
            "{what}: {name} rel L2 {e:.3e} (tol {tol:.1e})"
        );
        worst = worst.max(e);
    }
    println!("{what}: ok (worst rel L2 {worst:.2e})");
    worst
}

#[test]
fn forward_and_gradients_match_candle_attention() {
    let dev = dev();
    let shapes: [Dims; 6] = [
        (2, 256, 256, 8, 8, 64),
        (2, 200, 333, 8, 2, 128),  // GQA 4:1, sq < sk
        (1, 333, 129, 16, 1, 128), // MQA, sq > sk (causal rows without keys)
        (2, 77, 77, 4, 4, 32),
        (1, 190, 190, 4, 2, 96),
        (1, 130, 130, 2, 2, 256),
    ];
    let slopes_h = |h: usize| {
        Tensor::from_vec(
            (0..h).map(|i| 0.5f32.powi(i as i32 % 8 + 1)).collect(),
            h,
            &dev,
        )
        .unwrap()
    };
    let slopes_bh = |b: usize, h: usize| {
        Tensor::from_vec(
            (0..b * h).map(|i| 0.02 * (i + 1) as f32).collect(),
            (b, h),
            &dev,
        )
        .unwrap()
    };
    let mut worst = [0f64; 2];
    for (i, dims) in shapes.into_iter().enumerate() {
        let (b, _, _, h, _, _) = dims;
        let mut params = vec![
            ("plain", FlashParams::new()),
            ("causal", FlashParams::causal()),
        ];
        if i < 3 {
            params.push((
                "window (63, 0)",
                FlashParams::new().with_window(Some(63), Some(0)),
            ));
            params.push((
                "window (17, 40)",
                FlashParams::new().with_window(Some(17), Some(40)),
            ));
            params.push((
                "causal softcap 30",
                FlashParams::causal().with_softcap(30.0),
            ));
            params.push((
                "softcap 5 scale 0.2",
                FlashParams::new().with_softcap(5.0).with_scale(0.2),
            ));
            params.push((
                "causal alibi [h]",
                FlashParams::causal().with_alibi(slopes_h(h)),
            ));
            params.push((
                "alibi [b, h]",
                FlashParams::new().with_alibi(slopes_bh(b, h)),
            ));
        }
        for (name, p) in &params {
            for (j, dt) in [DType::F16, DType::BF16].into_iter().enumerate() {
                let e = check(dims, dt, p, &format!("{dims:?} {dt:?} {name}"));
                worst[j] = worst[j].max(e);
            }
        }
    }
    println!("worst rel L2: f16 {:.2e}, bf16 {:.2e}", worst[0], worst[1]);
}

#[test]
fn strided_inputs_and_non_contiguous_gradients() {
    let dev = dev();
    let (b, s, h, d) = (2, 160, 8, 64);
    // q, k, v as views of one [b, s, 3, h, d] projection, and [b, h, s, d] transposed
    let qkv = randn(&dev, (b, s, 3 * h, d), DType::BF16);
    let q = qkv.narrow(2, 0, h).unwrap();
    let k = qkv.narrow(2, h, h).unwrap();
    let vt = randn(&dev, (b, h, s, d), DType::BF16);
    let v = vt.transpose(1, 2).unwrap();
    let p = FlashParams::causal();
    let got = flash_attn(&q, &k, &v, &p).unwrap();
    let want = flash_attn(
        &q.contiguous().unwrap(),
        &k.contiguous().unwrap(),
        &v.contiguous().unwrap(),
        &p,
    )
    .unwrap();
    assert_eq!(
        rel_l2(&got, &want),
        0.0,
        "strided inputs give the contiguous result"
    );
    // a gradient that reaches the op transposed (o used through a transpose)
    let qv = Var::from_tensor(&q.contiguous().unwrap()).unwrap();
    let o = flash_attn(qv.as_tensor(), &k, &v, &p).unwrap();
    let loss = o
        .transpose(1, 2)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap();
    let g = loss.backward().unwrap();
    let dq = g.get(qv.as_tensor()).unwrap();
    assert!(
        dq.to_dtype(DType::F32)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            > 0.0
    );
    println!("strided: ok");
}

#[test]
fn deterministic_backward_is_bitwise_reproducible() {
    let dev = dev();
    let (q, k) = (
        randn(&dev, (2, 300, 8, 128), DType::BF16),
        randn(&dev, (2, 300, 2, 128), DType::BF16),
    );
    let p = FlashParams::causal().with_deterministic(true);
    let grads = || {
        let qv = Var::from_tensor(&q).unwrap();
        let kv = Var::from_tensor(&k).unwrap();
        let o = flash_attn(qv.as_tensor(), kv.as_tensor(), kv.as_tensor(), &p).unwrap();
        let g = o
            .to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let f = |t: &Tensor| {
            t.to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        (
            f(g.get(qv.as_tensor()).unwrap()),
            f(g.get(kv.as_tensor()).unwrap()),
        )
    };
    let (a, b) = (grads(), grads());
    assert!(
        a.0.iter()
            .zip(&b.0)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "dq differs"
    );
    assert!(
        a.1.iter()
            .zip(&b.1)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "dk differs"
    );
    println!("deterministic: ok");
}

#[test]
fn errors_on_the_gpu_name_the_fix() {
    let dev = dev();
    let q32 = Tensor::randn(0f32, 1., (1, 8, 2, 64), &dev).unwrap();
    let e = flash_attn(&q32, &q32, &q32, &FlashParams::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("f16 or bf16"), "{e}");
    let q = randn(&dev, (1, 8, 2, 12), DType::F16);
    let e = flash_attn(&q, &q, &q, &FlashParams::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("flash-ptx") && e.contains("12"), "{e}");
    let q = randn(&dev, (1, 8, 2, 64), DType::F16);
    let slopes = Tensor::new(&[0.5f32, 0.25], &dev).unwrap();
    let p = FlashParams::new()
        .with_window(Some(4), Some(0))
        .with_alibi(slopes);
    let e = flash_attn(&q, &q, &q, &p).unwrap_err().to_string();
    assert!(e.contains("flash-ptx"), "{e}");
    let cpu = Tensor::zeros((1, 8, 2, 64), DType::F16, &Device::Cpu).unwrap();
    let e = flash_attn(&q, &cpu, &cpu, &FlashParams::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is on"), "{e}");
    println!("errors: ok\n  {e}");
}
