//! CPU tests of the varlen, KV-cache and paged entry points (their candle-ops paths)
//! against flash-runtime's float64 references, and their input checks. The paged cache
//! is built here on the host from the page table, independently of the crate's gather.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::{flat, modifiers, randn};
use flash_ptx_candle::{
    FlashParams, PagedCache, Varlen, compat, flash_attn_kvcache, flash_attn_paged,
    flash_attn_varlen,
};
use flash_runtime::reference::{
    Shape, VarlenShape, attention_kvcache_with, attention_varlen_backward_with,
    attention_varlen_with, rel_l2,
};

const CPU: Device = Device::Cpu;

/// The modifier sets each test runs (slopes for `batch` sequences of `h` heads).
fn param_sets(batch: usize, h: usize) -> Vec<(&'static str, FlashParams, Option<Vec<f32>>)> {
    let per_head: Vec<f32> = (0..h).map(|i| 0.5f32.powi(i as i32 + 1)).collect();
    let per_bh: Vec<f32> = (0..batch * h).map(|i| 0.2 + 0.05 * i as f32).collect();
    vec![
        ("plain", FlashParams::new(), None),
        ("causal", FlashParams::causal(), None),
        (
            "window (3, 1)",
            FlashParams::new().with_window(Some(3), Some(1)),
            None,
        ),
        (
            "causal softcap",
            FlashParams::causal().with_softcap(1.5),
            None,
        ),
        ("alibi [h]", FlashParams::causal(), Some(per_head)),
        ("alibi [b, h]", FlashParams::new(), Some(per_bh)),
    ]
}

fn with_slopes(p: FlashParams, slopes: &Option<Vec<f32>>, batch: usize, h: usize) -> FlashParams {
    match slopes {
        None => p,
        Some(s) if s.len() == h => p.with_alibi(Tensor::new(s.as_slice(), &CPU).unwrap()),
        Some(s) => p.with_alibi(Tensor::from_vec(s.clone(), (batch, h), &CPU).unwrap()),
    }
}

fn packed(total: usize, heads: usize, d: usize, seed: u64) -> Var {
    Var::from_tensor(&randn((1, total, heads, d), seed).squeeze(0).unwrap()).unwrap()
}

#[test]
fn varlen_matches_the_float64_reference() {
    // sequence 1 has no queries, sequence 2 queries and no keys; rows 20..23 of q are in
    // no sequence
    let (cq, ck) = (vec![0usize, 5, 5, 17, 20], vec![0usize, 9, 12, 12, 30]);
    let (total_q, total_k, h, hk, d) = (23, 31, 4, 2, 16);
    let batch = cq.len() - 1;
    let offsets = |c: &[usize]| Tensor::new(c.iter().map(|&x| x as u32).collect::<Vec<_>>(), &CPU);
    let vl = Varlen::new(&offsets(&cq).unwrap(), &offsets(&ck).unwrap(), 12, 18);
    let (q, k, v) = (
        packed(total_q, h, d, 11),
        packed(total_k, hk, d, 12),
        packed(total_k, hk, d, 13),
    );
    let d_o = randn((1, total_q, h, d), 14).squeeze(0).unwrap();
    let shape = VarlenShape {
        cu_seqlens_q: cq.clone(),
        cu_seqlens_k: ck.clone(),
        heads: h,
        heads_k: hk,
        head_dim: d,
    };
    let (rows_q, rows_k) = (cq[batch] * h * d, ck[batch] * hk * d);
    for (what, p, slopes) in param_sets(batch, h) {
        let p = with_slopes(p, &slopes, batch, h);
        let o = flash_attn_varlen(q.as_tensor(), k.as_tensor(), v.as_tensor(), &vl, &p).unwrap();
        assert_eq!(o.dims(), [total_q, h, d]);
        let grads = (&o * &d_o).unwrap().sum_all().unwrap().backward().unwrap();
        let (qh, kh, vh, doh) = (flat(&q), flat(&k), flat(&v), flat(&d_o));
        let ins = (&qh[..rows_q], &kh[..rows_k], &vh[..rows_k]);
        let mods = modifiers(&p, slopes.as_deref());
        let want = attention_varlen_with(&shape, ins, &mods, None).unwrap();
        let got = flat(&o);
        let err = rel_l2(&got[..rows_q], &want.o);
        assert!(err < 1e-5, "varlen {what}: o rel L2 {err:.2e}");
        assert!(
            got[rows_q..].iter().all(|&x| x == 0.0),
            "varlen {what}: rows of no sequence"
        );
        let g = attention_varlen_backward_with(&shape, ins, &doh[..rows_q], &mods, None).unwrap();
        for (name, var, want, rows) in [
            ("dq", &q, &g.dq, rows_q),
            ("dk", &k, &g.dk, rows_k),
            ("dv", &v, &g.dv, rows_k),
        ] {
            let got = flat(grads.get(var.as_tensor()).unwrap());
            let err = rel_l2(&got[..rows], want);
            assert!(err < 1e-4, "varlen {what}: {name} rel L2 {err:.2e}");
            assert!(
                got[rows..].iter().all(|&x| x == 0.0),
                "varlen {what}: {name} tail"
            );
        }
        println!("varlen {what}: ok");
    }
}

#[test]
fn varlen_rejects_bad_offsets_with_messages() {
    let (q, k) = (packed(10, 2, 8, 1), packed(10, 2, 8, 2));
    let (q, k) = (q.as_tensor(), k.as_tensor());
    let run = |cq: &[u32], ck: &[u32], max: usize| {
        let vl = Varlen::new(
            &Tensor::new(cq, &CPU).unwrap(),
            &Tensor::new(ck, &CPU).unwrap(),
            max,
            max,
        );
        flash_attn_varlen(q, k, k, &vl, &FlashParams::new())
            .unwrap_err()
            .to_string()
    };
    for (cq, ck, max, needle) in [
        (&[0u32, 6, 4][..], &[0u32, 5, 10][..], 10, "non-decreasing"),
        (&[1, 6, 10], &[0, 5, 10], 10, "non-decreasing from 0"),
        (&[0, 6, 11], &[0, 5, 10], 10, "packed length 10"),
        (&[0, 6, 10], &[0, 5, 10], 5, "longer than its max_seqlen 5"),
        (&[0, 6, 10], &[0, 10], 10, "cu_seqlens_k has shape [2]"),
        (&[], &[], 10, "cu_seqlens_q is empty"),
    ] {
        let msg = run(cq, ck, max);
        assert!(msg.contains(needle), "{cq:?} {ck:?}: {msg}");
    }
    let f = Tensor::new(&[0f32, 10.0], &CPU).unwrap();
    let vl = Varlen::new(&f, &f, 10, 10);
    let msg = flash_attn_varlen(q, k, k, &vl, &FlashParams::new())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("expected u32 or i32"), "{msg}");
    let vl = Varlen::new(
        &Tensor::new(&[0u32, 10], &CPU).unwrap(),
        &Tensor::new(&[0u32, 10], &CPU).unwrap(),
        10,
        10,
    );
    let q4 = q.unsqueeze(0).unwrap();
    let msg = flash_attn_varlen(&q4, k, k, &vl, &FlashParams::new())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("rank 3"), "{msg}");
}

/// `flash_attn_kvcache` on caches `[b, cap, hk, d]` with `lens` (as i32) against the
/// float64 reference; `paged`: the same caches cut into pages of `page` keys, shuffled
/// into a pool, read through a page table by `flash_attn_paged`.
fn check_kv(b: usize, sq: usize, cap: usize, lens: &[i32], paged: Option<usize>) {
    let (h, hk, d) = (4, 2, 16);
    let q = randn((b, sq, h, d), 21);
    let (kc, vc) = (randn((b, cap, hk, d), 22), randn((b, cap, hk, d), 23));
    let shape = Shape::new(b, sq, cap, h, hk, d);
    let lens_t = Tensor::new(lens, &CPU).unwrap();
    for (what, p, slopes) in param_sets(b, h) {
        let p = with_slopes(p, &slopes, b, h);
        let o = match paged {
            None => flash_attn_kvcache(&q, &kc, &vc, Some(&lens_t), &p).unwrap(),
            Some(page) => {
                let cache = pages_of(&kc, &vc, page);
                flash_attn_paged(&q, &cache, Some(&lens_t), &p).unwrap()
            }
        };
        let mods = modifiers(&p, slopes.as_deref());
        let want = attention_kvcache_with(
            &shape,
            (&flat(&q), &flat(&kc), &flat(&vc)),
            lens,
            &mods,
            None,
        )
        .unwrap();
        let err = rel_l2(&flat(&o), &want.o);
        assert!(
            err < 1e-5,
            "kvcache {paged:?} {lens:?} {what}: o rel L2 {err:.2e}"
        );
    }
    println!("kvcache b{b} sq{sq} cap{cap} {lens:?} paged {paged:?}: ok");
}

/// The caches cut into pages of `page` keys, the pages placed in a pool in a shuffled
/// order (plus one unused page), and the table that finds them.
fn pages_of(kc: &Tensor, vc: &Tensor, page: usize) -> PagedCache {
    let (b, cap, hk, d) = kc.dims4().unwrap();
    let per_seq = cap / page;
    let n = b * per_seq;
    // pool slot of logical page i (sequence i / per_seq, page i % per_seq): a permutation
    let slot: Vec<usize> = (0..n).map(|i| (i * 5 + 3) % n).collect();
    let mut order = vec![0usize; n];
    for (i, &s) in slot.iter().enumerate() {
        order[s] = i;
    }
    let pool = |c: &Tensor| {
        let pages = c.reshape((n, page, hk, d)).unwrap();
        let idx = Tensor::new(order.iter().map(|&i| i as u32).collect::<Vec<_>>(), &CPU).unwrap();
        let spare = Tensor::full(f32::NAN, (1, page, hk, d), &CPU).unwrap();
        Tensor::cat(&[pages.index_select(&idx, 0).unwrap(), spare], 0).unwrap()
    };
    let table: Vec<u32> = slot.iter().map(|&s| s as u32).collect();
    let table = Tensor::from_vec(table, (b, per_seq), &CPU).unwrap();
    PagedCache::new(&pool(kc), &pool(vc), &table)
}

#[test]
fn kvcache_matches_the_float64_reference() {
    check_kv(3, 3, 24, &[24, 0, 11], None);
    check_kv(2, 1, 16, &[1, 16], None);
    check_kv(2, 5, 12, &[30, -4], None); // clamped to [0, capacity]
    check_kv(3, 3, 24, &[24, 0, 11], Some(4));
    check_kv(2, 4, 32, &[32, 9], Some(8));
}

#[test]
fn kvcache_without_lengths_reads_the_whole_cache() {
    let (q, kc) = (randn((2, 2, 2, 8), 31), randn((2, 6, 2, 8), 32));
    let p = FlashParams::causal();
    let all = Tensor::new(&[6u32, 6], &CPU).unwrap();
    let a = flash_attn_kvcache(&q, &kc, &kc, None, &p).unwrap();
    let b = flash_attn_kvcache(&q, &kc, &kc, Some(&all), &p).unwrap();
    assert_eq!(flat(&a), flat(&b));
}

#[test]
fn kvcache_and_paged_reject_bad_inputs_with_messages() {
    let (q, kc) = (randn((2, 1, 2, 8), 41), randn((2, 8, 2, 8), 42));
    let p = FlashParams::new();
    let err = |r: candle_core::Result<Tensor>| r.unwrap_err().to_string();
    let lens3 = Tensor::new(&[1u32, 2, 3], &CPU).unwrap();
    let msg = err(flash_attn_kvcache(&q, &kc, &kc, Some(&lens3), &p));
    assert!(
        msg.contains("seqlens_k has shape [3]: expected [2]"),
        "{msg}"
    );
    let lens_f = Tensor::new(&[1f32, 2.0], &CPU).unwrap();
    let msg = err(flash_attn_kvcache(&q, &kc, &kc, Some(&lens_f), &p));
    assert!(msg.contains("expected u32 or i32"), "{msg}");
    let pool = randn((4, 6, 2, 8), 43);
    let table = Tensor::new(&[[0u32, 1], [2, 3]], &CPU).unwrap();
    let msg = err(flash_attn_paged(
        &q,
        &PagedCache::new(&pool, &pool, &table),
        None,
        &p,
    ));
    assert!(msg.contains("page size 6"), "{msg}");
    let pool = randn((4, 4, 2, 8), 44);
    let short = Tensor::new(&[[0u32, 1]], &CPU).unwrap();
    let msg = err(flash_attn_paged(
        &q,
        &PagedCache::new(&pool, &pool, &short),
        None,
        &p,
    ));
    assert!(
        msg.contains("block_table has shape [1, 2]: expected [2, 2]"),
        "{msg}"
    );
    let other = randn((4, 4, 2, 16), 45);
    let msg = err(flash_attn_paged(
        &q,
        &PagedCache::new(&other, &other, &table),
        None,
        &p,
    ));
    assert!(msg.contains("head_dim must agree"), "{msg}");
    let half = q.to_dtype(DType::F16).unwrap();
    let msg = err(flash_attn_paged(
        &half,
        &PagedCache::new(&pool, &pool, &table),
        None,
        &p,
    ));
    assert!(msg.contains("dtypes differ"), "{msg}");
}

#[test]
fn compat_varlen_entry_points_match_flash_attn_varlen() {
    let (q, k) = (packed(12, 4, 8, 51), packed(15, 2, 8, 52));
    let (q, k) = (q.as_tensor(), k.as_tensor());
    let (cq, ck) = (
        Tensor::new(&[0u32, 5, 12], &CPU).unwrap(),
        Tensor::new(&[0u32, 9, 15], &CPU).unwrap(),
    );
    let vl = Varlen::new(&cq, &ck, 7, 9);
    let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &CPU).unwrap();
    let want = |p: FlashParams| flat(&flash_attn_varlen(q, k, k, &vl, &p.with_scale(0.3)).unwrap());
    let got = compat::flash_attn_varlen(q, k, k, &cq, &ck, 7, 9, 0.3, true).unwrap();
    assert_eq!(flat(&got), want(FlashParams::causal()));
    let got = compat::flash_attn_varlen_windowed(q, k, k, &cq, &ck, 7, 9, 0.3, Some(2), Some(1));
    assert_eq!(
        flat(&got.unwrap()),
        want(FlashParams::new().with_window(Some(2), Some(1)))
    );
    let got = compat::flash_attn_varlen_alibi(q, k, k, &slopes, &cq, &ck, 7, 9, 0.3, false);
    assert_eq!(
        flat(&got.unwrap()),
        want(FlashParams::new().with_alibi(slopes.clone()))
    );
    let got = compat::flash_attn_varlen_alibi_windowed(
        q,
        k,
        k,
        &slopes,
        &cq,
        &ck,
        7,
        9,
        0.3,
        Some(3),
        Some(0),
    );
    let p = FlashParams::new()
        .with_window(Some(3), Some(0))
        .with_alibi(slopes.clone());
    assert_eq!(flat(&got.unwrap()), want(p));
    let got = compat::flash_attn_varlen_alibi_windowed_softcap(
        q,
        k,
        k,
        None,
        &cq,
        &ck,
        7,
        9,
        0.3,
        None,
        Some(0),
        2.0,
    );
    assert_eq!(
        flat(&got.unwrap()),
        want(FlashParams::causal().with_softcap(2.0))
    );
    // the window (None, Some(0)) is causal: one kernel and one result either way
    assert_ne!(want(FlashParams::causal()), want(FlashParams::new()));
}
