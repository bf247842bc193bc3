//! One KV-cache case on the GPU (`run_case`): the inputs uploaded (the caches NaN past each
//! sequence's length; or page pools and a permuted page table, `paged.rs`), `forward_kvcache_into` twice and `forward_kvcache` once, and every
//! check of the outputs against the f64 reference and each other.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use flash_runtime::reference::{Shape, attention_kvcache_with};
use flash_runtime::rng::Rng;
use flash_runtime::{Alibi, Element, FlashAttention, PagedKv};

use super::paged::scatter;
use super::{Case, LSE_GUARD, LSE_SENTINEL, Layout, O_SENTINEL, cache_place};
use crate::gpu_support::{Outcome, Placed, check_o, lse_abs_err, rounded, upload};

/// The bits of a buffer's elements, to compare two runs.
fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.to_f32().to_bits()).collect()
}

fn fbits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// One `forward_kvcache_into` call's outputs, downloaded: o's whole buffer and lse's
/// (guards included).
struct Run<T> {
    o: Vec<T>,
    lse: Vec<f32>,
}

pub fn run_case<T: Element>(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    c: &Case,
    seed: u64,
) -> Result<Outcome, Box<dyn Error>> {
    let mut rng = Rng::new(seed);
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.cap, c.hk, c.d]);
    let (q, qf) = rounded::<T>(&mut rng, qs.iter().product());
    let (k, kf) = rounded::<T>(&mut rng, ks.iter().product());
    let (v, vf) = rounded::<T>(&mut rng, ks.iter().product());
    if let Some(l) = &c.lens {
        assert_eq!(l.len(), c.b, "case bug: lens must hold b values");
    }
    let lens = c.clamped_lens();

    // inputs: q padded or not (NaN gaps); the caches with NaN everywhere but the valid
    // rows of each sequence (paged: NaN in every pool row no sequence holds)
    let strided = c.layout == Layout::Strided;
    let pq = Placed::new(qs, strided);
    let q_d = upload(stream, &pq, &q)?;
    let (pk, kv_len) = cache_place(c);
    let row = c.hk * c.d;
    let cache = |vals: &[T]| {
        let mut host = vec![T::from_f32(f32::NAN); kv_len];
        for (i, (&p, &x)) in pk.positions().iter().zip(vals).enumerate() {
            let (bi, j) = (i / (c.cap * row), (i / row) % c.cap);
            if j < lens[bi] {
                host[p] = x;
            }
        }
        stream.clone_htod(&host)
    };
    let (k_d, v_d, kf, vf, pools) = match &c.paged {
        None => (cache(&k)?, cache(&v)?, kf, vf, None),
        Some(p) => {
            let (pools, kf, vf) = scatter(c, p, &lens, (&k, &v), &mut rng);
            let (k_d, v_d) = (stream.clone_htod(&pools.k)?, stream.clone_htod(&pools.v)?);
            // an empty table still gets a buffer (of one garbage entry)
            let table = match pools.table.is_empty() {
                true => stream.clone_htod(&[i32::MAX])?,
                false => stream.clone_htod(&pools.table)?,
            };
            (k_d, v_d, kf, vf, Some((pools, table)))
        }
    };
    let (kd, vd) = (&k_d, &v_d);
    let paged = pools.as_ref().map(|(p, table)| {
        let t = [c.b, p.max_pages];
        PagedKv::new(p.place.view(kd), p.place.view(vd), table.as_view(), t)
    });
    let seqlens_d = match &c.lens {
        Some(l) => Some(stream.clone_htod(l)?),
        None => None,
    };
    let seqlens_v = seqlens_d.as_ref().map(|s| s.as_view());
    let slopes_d = match c.alibi {
        Some(_) => Some(stream.clone_htod(&c.slopes())?),
        None => None,
    };
    let params = match (c.alibi, &slopes_d) {
        (Some(true), Some(s)) => c.params().with_alibi(Alibi::per_batch_head(s)),
        (Some(false), Some(s)) => c.params().with_alibi(Alibi::per_head(s)),
        _ => c.params(),
    };
    let opts = c.opts();

    // outputs: o NaN in the view, the sentinel elsewhere; lse NaN between sentinel bands
    let po = Placed::new(qs, strided);
    let (o_pos, o_len) = (po.positions(), po.buffer_len());
    let lse_n = c.b * c.h * c.sq;
    let mut o_host0 = vec![T::from_f32(O_SENTINEL); o_len];
    o_pos
        .iter()
        .for_each(|&p| o_host0[p] = T::from_f32(f32::NAN));
    let mut lse_host0 = vec![LSE_SENTINEL; LSE_GUARD + lse_n + LSE_GUARD];
    lse_host0[LSE_GUARD..LSE_GUARD + lse_n].fill(f32::NAN);

    let into = || -> Result<Run<T>, Box<dyn Error>> {
        let mut o_buf = stream.clone_htod(&o_host0)?;
        let mut lse_buf = stream.clone_htod(&lse_host0)?;
        {
            let mut o_t = po.view_mut(&mut o_buf);
            let lse_arg = c.lse.then(|| lse_buf.slice_mut(LSE_GUARD..));
            let (q_t, lens_v) = (pq.view(&q_d), seqlens_v.as_ref());
            match &paged {
                None => rt.forward_kvcache_into(
                    stream,
                    &q_t,
                    &pk.view(&k_d),
                    &pk.view(&v_d),
                    lens_v,
                    &mut o_t,
                    lse_arg,
                    &params,
                    &opts,
                )?,
                Some(cache) => rt.forward_kvcache_paged_into(
                    stream, &q_t, cache, lens_v, &mut o_t, lse_arg, &params, &opts,
                )?,
            }
        }
        Ok(Run {
            o: stream.clone_dtoh(&o_buf)?,
            lse: stream.clone_dtoh(&lse_buf)?,
        })
    };
    let first = into()?;
    let second = into()?;
    let alloc = match &paged {
        None => rt.forward_kvcache(
            stream,
            &pq.view(&q_d),
            &pk.view(&k_d),
            &pk.view(&v_d),
            seqlens_v.as_ref(),
            &params,
            &opts,
        )?,
        Some(cache) => {
            let q_t = pq.view(&q_d);
            let lens_v = seqlens_v.as_ref();
            rt.forward_kvcache_paged(stream, &q_t, cache, lens_v, &params, &opts)?
        }
    };
    let alloc_o: Vec<T> = stream.clone_dtoh(&alloc.o)?;
    let alloc_lse: Vec<f32> = stream.clone_dtoh(&alloc.lse)?;

    let shape = Shape::new(c.b, c.sq, c.cap, c.h, c.hk, c.d);
    let ref_lens: Vec<i32> = match &c.lens {
        Some(l) => l.clone(),
        None => vec![i32::try_from(c.cap)?; c.b],
    };
    let (mods, scale) = c.modifiers();
    let r = attention_kvcache_with(&shape, (&qf, &kf, &vf), &ref_lens, &mods, scale)?;

    let mut problems = Vec::new();
    let (o_host, lse_host) = (&first.o, &first.lse);
    let mut in_view = vec![false; o_len];
    o_pos.iter().for_each(|&p| in_view[p] = true);
    let sentinel = O_SENTINEL.to_bits();
    let overwritten = (0..o_len)
        .filter(|&p| !in_view[p] && o_host[p].to_f32().to_bits() != sentinel)
        .count();
    if overwritten > 0 {
        problems.push(format!(
            "{overwritten} o guard elements (outside the view) overwritten"
        ));
    }
    let o: Vec<f64> = o_pos.iter().map(|&p| o_host[p].to_f32() as f64).collect();
    let nan = o.iter().filter(|x| x.is_nan()).count();
    if nan > 0 {
        problems.push(format!(
            "{nan} of {} o elements NaN (unwritten, or read from the NaN past a sequence's \
             length / outside the views)",
            o.len()
        ));
    }
    let o_err = check_o(&o, &r.o, &r.lse, qs, c.dtype, &mut problems);

    let (front, tail) = (&lse_host[..LSE_GUARD], &lse_host[LSE_GUARD + lse_n..]);
    if front
        .iter()
        .chain(tail)
        .any(|&x| x.to_bits() != LSE_SENTINEL.to_bits())
    {
        problems.push("lse guard band overwritten (before the view or past b*h*sq)".into());
    }
    let lse = &lse_host[LSE_GUARD..LSE_GUARD + lse_n];
    let mut lse_err = 0.0f64;
    if c.lse {
        let mut reported = 0;
        for (i, (&got, &want)) in lse.iter().zip(&r.lse).enumerate() {
            let e = lse_abs_err(got, want);
            let e_ok = e <= 1e-3; // false for NaN
            if !e_ok && reported < 3 {
                problems.push(format!("lse[{i}] = {got}, want {want}"));
                reported += 1;
            }
            lse_err = if e.is_nan() {
                f64::INFINITY
            } else {
                lse_err.max(e)
            };
        }
    } else if lse.iter().any(|x| !x.is_nan()) {
        problems.push("lse written though the call got None".into());
    }

    // the same call twice: the same bits everywhere (guards included)
    if bits(&first.o) != bits(&second.o) {
        let n = bits(&first.o)
            .iter()
            .zip(bits(&second.o))
            .filter(|(a, b)| **a != *b)
            .count();
        problems.push(format!(
            "not deterministic: {n} o elements differ between two runs"
        ));
    }
    if fbits(&first.lse) != fbits(&second.lse) {
        problems.push("not deterministic: lse differs between two runs".into());
    }
    // the allocating call: o contiguous, the same bits as `_into`'s view
    let o_into: Vec<u32> = o_pos
        .iter()
        .map(|&p| o_host[p].to_f32().to_bits())
        .collect();
    if alloc.shape != qs || alloc_o.len() < o_into.len() || alloc_lse.len() < lse_n {
        problems.push(format!(
            "forward_kvcache returned shape {:?}, o {} and lse {} elements; want {qs:?}, {} \
             and {lse_n}",
            alloc.shape,
            alloc_o.len(),
            alloc_lse.len(),
            o_into.len()
        ));
    } else {
        let n = bits(&alloc_o[..o_into.len()])
            .iter()
            .zip(&o_into)
            .filter(|(a, b)| *a != *b)
            .count();
        if n > 0 {
            problems.push(format!(
                "forward_kvcache (allocating) differs from forward_kvcache_into in {n} o \
                 elements"
            ));
        }
        if c.lse && fbits(&alloc_lse[..lse_n]) != fbits(lse) {
            problems.push("forward_kvcache (allocating) lse differs from _into's".into());
        }
    }
    Ok(Outcome {
        o_err,
        lse_err,
        problems,
    })
}
