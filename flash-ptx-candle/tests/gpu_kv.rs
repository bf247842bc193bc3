//! GPU tests (`--features gpu`) of the varlen, KV-cache and paged entry points: flash-ptx's
//! kernels on CUDA tensors against the crate's candle-ops paths in f32 on the same
//! rounded inputs (varlen: forward and gradients; caches: forward), both dtypes, head
//! dims 64 and 128, GQA, causal, windows, softcap, ALiBi, uneven and empty sequences,
//! key counts outside the cache, split counts, shuffled pages next to NaN pages.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::gpu::{dev, randn, rel_l2, vars};
use flash_ptx_candle::{
    FlashParams, PagedCache, Varlen, attention_kvcache, attention_varlen, flash_attn_kvcache,
    flash_attn_paged, flash_attn_varlen,
};

/// `GPU_KV_QUICK=1` (the memcheck run): one shape and dtype per test.
fn quick() -> bool {
    std::env::var_os("GPU_KV_QUICK").is_some()
}

fn tol(dt: DType) -> f64 {
    match dt {
        DType::BF16 => 1.6e-2,
        _ => 2.5e-3,
    }
}

/// The modifier sets, slopes per (sequence, head) for `b` sequences of `h` heads.
fn param_sets(b: usize, h: usize) -> Vec<(&'static str, FlashParams)> {
    let slopes: Vec<f32> = (0..b * h).map(|i| 0.02 + 0.01 * i as f32).collect();
    let slopes = Tensor::from_vec(slopes, (b, h), &dev()).unwrap();
    vec![
        ("plain", FlashParams::new()),
        ("causal", FlashParams::causal()),
        (
            "window (40, 8)",
            FlashParams::new().with_window(Some(40), Some(8)),
        ),
        (
            "causal softcap 20",
            FlashParams::causal().with_softcap(20.0),
        ),
        (
            "causal alibi [b, h]",
            FlashParams::causal().with_alibi(slopes),
        ),
    ]
}

#[test]
fn varlen_forward_and_gradients_match_candle_attention() {
    // an empty sequence, one with queries and no keys, odd lengths, rows of no sequence
    let (cq, ck) = (
        vec![0u32, 130, 130, 137, 400],
        vec![0u32, 200, 333, 333, 590],
    );
    let (total_q, total_k) = (403, 600);
    let dev = dev();
    let cu = |c: &[u32]| Tensor::new(c, &dev).unwrap();
    let vl = Varlen::new(&cu(&cq), &cu(&ck), 263, 257);
    for (h, hk, d) in [(8, 2, 64), (4, 4, 128)]
        .into_iter()
        .take(if quick() { 1 } else { 2 })
    {
        for dt in [DType::BF16, DType::F16]
            .into_iter()
            .take(if quick() { 1 } else { 2 })
        {
            let q = randn(&dev, (1, total_q, h, d), dt).squeeze(0).unwrap();
            let k = randn(&dev, (1, total_k, hk, d), dt).squeeze(0).unwrap();
            let v = randn(&dev, (1, total_k, hk, d), dt).squeeze(0).unwrap();
            let d_o = randn(&dev, (1, total_q, h, d), DType::F32)
                .squeeze(0)
                .unwrap();
            for (what, p) in param_sets(cq.len() - 1, h) {
                let run = |dtype: DType, ours: bool| {
                    let x = vars([&q, &k, &v], dtype);
                    let (q, k, v) = (x[0].as_tensor(), x[1].as_tensor(), x[2].as_tensor());
                    let o = match ours {
                        true => flash_attn_varlen(q, k, v, &vl, &p).unwrap(),
                        false => attention_varlen(q, k, v, &vl, &p).unwrap(),
                    };
                    let o32 = o.to_dtype(DType::F32).unwrap();
                    let g = (&o32 * &d_o)
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .backward()
                        .unwrap();
                    let grads: Vec<Tensor> = x
                        .iter()
                        .map(|x| g.get(x.as_tensor()).unwrap().clone())
                        .collect();
                    (o32, grads)
                };
                let ((o, g), (o_ref, g_ref)) = (run(dt, true), run(DType::F32, false));
                let mut worst = 0f64;
                for (name, got, want) in [
                    ("o", &o, &o_ref),
                    ("dq", &g[0], &g_ref[0]),
                    ("dk", &g[1], &g_ref[1]),
                    ("dv", &g[2], &g_ref[2]),
                ] {
                    assert_eq!(got.dims(), want.dims());
                    let e = rel_l2(got, want);
                    assert!(
                        e < tol(dt),
                        "varlen h{h}/{hk} d{d} {dt:?} {what}: {name} rel L2 {e:.3e}"
                    );
                    worst = worst.max(e);
                }
                let tail = o
                    .narrow(0, 400, 3)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .sum_all()
                    .unwrap();
                assert_eq!(tail.to_scalar::<f32>().unwrap(), 0.0, "rows of no sequence");
                println!("varlen h{h}/{hk} d{d} {dt:?} {what}: ok (worst rel L2 {worst:.2e})");
            }
        }
    }
}

/// The cache cut into pages of `page` keys and placed in a pool in shuffled order, with
/// NaN pages between them (never in the table), and the table.
fn paged(kc: &Tensor, vc: &Tensor, page: usize) -> PagedCache {
    let (b, cap, hk, d) = kc.dims4().unwrap();
    let n = b * cap / page;
    let slot: Vec<usize> = (0..n).map(|i| 2 * ((i * 7 + 3) % n)).collect(); // even slots
    let pool = |c: &Tensor| {
        let pages = c.reshape((n, page, hk, d)).unwrap();
        let nan = Tensor::full(f32::NAN, (1, page, hk, d), &Device::Cpu)
            .unwrap()
            .to_dtype(c.dtype())
            .unwrap()
            .to_device(c.device())
            .unwrap();
        let mut parts = vec![nan.clone(); 2 * n];
        for (i, &s) in slot.iter().enumerate() {
            parts[s] = pages.narrow(0, i, 1).unwrap();
        }
        Tensor::cat(&parts, 0).unwrap()
    };
    let table: Vec<u32> = slot.iter().map(|&s| s as u32).collect();
    let table = Tensor::from_vec(table, (b, cap / page), kc.device()).unwrap();
    PagedCache::new(&pool(kc), &pool(vc), &table)
}

#[test]
fn kvcache_and_paged_match_candle_attention() {
    let dev = dev();
    let (b, cap) = (4, 320);
    // a full cache, an empty one, odd counts; then counts outside [0, cap] (clamped)
    let lens_u = Tensor::new(&[320u32, 0, 17, 129], &dev).unwrap();
    let lens_i = Tensor::new(&[-3i32, 1000, 1, 250], &dev).unwrap();
    for (h, hk, d) in [(32, 8, 128), (8, 1, 64)]
        .into_iter()
        .take(if quick() { 1 } else { 2 })
    {
        for dt in [DType::BF16, DType::F16]
            .into_iter()
            .take(if quick() { 1 } else { 2 })
        {
            let kc = randn(&dev, (b, cap, hk, d), dt);
            let vc = randn(&dev, (b, cap, hk, d), dt);
            for sq in [1, 5] {
                let q = randn(&dev, (b, sq, h, d), dt);
                let up = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
                for (what, p) in param_sets(b, h) {
                    for (lens, splits) in [(&lens_u, None), (&lens_i, Some(3)), (&lens_u, Some(1))]
                    {
                        let p = match splits {
                            Some(n) => p.clone().with_num_splits(n),
                            None => p.clone(),
                        };
                        let want =
                            attention_kvcache(&up(&q), &up(&kc), &up(&vc), Some(lens), &p).unwrap();
                        let got = flash_attn_kvcache(&q, &kc, &vc, Some(lens), &p).unwrap();
                        assert_eq!(got.dtype(), dt);
                        let e = rel_l2(&got, &want);
                        let case = format!(
                            "kvcache h{h}/{hk} d{d} {dt:?} sq{sq} {what} splits {splits:?}"
                        );
                        assert!(e < tol(dt), "{case}: o rel L2 {e:.3e}");
                        let got =
                            flash_attn_paged(&q, &paged(&kc, &vc, 16), Some(lens), &p).unwrap();
                        let e2 = rel_l2(&got, &want);
                        assert!(e2 < tol(dt), "{case} paged 16: o rel L2 {e2:.3e}");
                        println!("{case}: ok (rel L2 {e:.2e}, paged {e2:.2e})");
                    }
                }
            }
        }
    }
}

#[test]
fn kvcache_has_no_backward_and_says_so() {
    let dev = dev();
    let q = Var::from_tensor(&randn(&dev, (1, 1, 4, 64), DType::BF16)).unwrap();
    let kc = randn(&dev, (1, 64, 4, 64), DType::BF16);
    let o = flash_attn_kvcache(q.as_tensor(), &kc, &kc, None, &FlashParams::causal()).unwrap();
    let loss = o.to_dtype(DType::F32).unwrap().sum_all().unwrap();
    let msg = loss.backward().unwrap_err().to_string();
    assert!(msg.contains("no backward"), "{msg}");
    let p = FlashParams::new().with_num_splits(0);
    let msg = flash_attn_kvcache(q.as_tensor(), &kc, &kc, None, &p)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("split"), "{msg}");
    println!("kvcache errors: ok");
}
