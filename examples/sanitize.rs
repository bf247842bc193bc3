//! Runs the d64, d128 and d256 forward and backward kernels (atomic and deterministic modes)
//! once per dtype and mask on odd shapes with GQA, and the d128 backward's long tiling
//! (atomic mode from 8192 query rows on; bf16), for `compute-sanitizer --tool memcheck`
//! and `--tool racecheck` (GPU machine, feature `gpu`). Checks every result against the
//! CPU float64 reference too; exits non-zero on any failure.

use flash_runtime::reference::{self, Shape, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::{
    AttnParams, BwdInputs, BwdOptions, Element, FlashAttention, GradsMut, Mask, Tensor4, Tensor4Mut,
};
use half::{bf16, f16};

struct Case {
    d: usize,
    causal: bool,
    sq: usize,
    sk: usize,
}

fn run<T: Element>(
    rt: &FlashAttention,
    rng: &mut Rng,
    c: &Case,
    deterministic: bool,
) -> flash_runtime::Result<[f64; 4]> {
    let (b, h, hk, d) = (2, 4, 2, c.d);
    let shape = Shape {
        batch: b,
        seqlen_q: c.sq,
        seqlen_k: c.sk,
        heads: h,
        heads_k: hk,
        head_dim: d,
    };
    let stream = rt.context().default_stream();
    let host =
        |rng: &mut Rng, n: usize| -> Vec<T> { (0..n).map(|_| T::from_f32(rng.normal())).collect() };
    let (qh, kh, vh, doh) = (
        host(rng, b * c.sq * h * d),
        host(rng, b * c.sk * hk * d),
        host(rng, b * c.sk * hk * d),
        host(rng, b * c.sq * h * d),
    );
    let nan = |n: usize| vec![T::from_f32(f32::NAN); n];
    let (q, k, v, d_o) = (
        stream.clone_htod(&qh)?,
        stream.clone_htod(&kh)?,
        stream.clone_htod(&vh)?,
        stream.clone_htod(&doh)?,
    );
    let mut o = stream.clone_htod(&nan(qh.len()))?;
    let mut lse = stream.clone_htod(&vec![f32::NAN; b * h * c.sq])?;
    let (qs, ks) = ([b, c.sq, h, d], [b, c.sk, hk, d]);
    let (tq, tk, tv) = (
        Tensor4::contiguous(&q, qs),
        Tensor4::contiguous(&k, ks),
        Tensor4::contiguous(&v, ks),
    );
    let params = AttnParams::new().with_mask(if c.causal { Mask::Causal } else { Mask::None });
    // NaN-poisoned outputs (an unwritten element fails the check): the preallocated calls
    rt.forward_into(
        &stream,
        &tq,
        &tk,
        &tv,
        &mut Tensor4Mut::contiguous(&mut o, qs),
        Some(lse.as_view_mut()),
        &params,
    )?;
    let (mut dq, mut dk, mut dv) = (
        stream.clone_htod(&nan(qh.len()))?,
        stream.clone_htod(&nan(kh.len()))?,
        stream.clone_htod(&nan(vh.len()))?,
    );
    let opts = match deterministic {
        true => BwdOptions::deterministic(),
        false => BwdOptions::default(),
    };
    rt.backward_into(
        &stream,
        BwdInputs {
            q: &tq,
            k: &tk,
            v: &tv,
            o: &Tensor4::contiguous(&o, qs),
            lse: &lse.as_view(),
            d_o: &Tensor4::contiguous(&d_o, qs),
        },
        GradsMut {
            dq: &mut Tensor4Mut::contiguous(&mut dq, qs),
            dk: &mut Tensor4Mut::contiguous(&mut dk, ks),
            dv: &mut Tensor4Mut::contiguous(&mut dv, ks),
        },
        &params,
        &opts,
        None,
    )?;
    let f = |x: Vec<T>| -> Vec<f64> { x.into_iter().map(|v| v.to_f32() as f64).collect() };
    let (o, dq, dk, dv) = (
        f(stream.clone_dtoh(&o)?),
        f(stream.clone_dtoh(&dq)?),
        f(stream.clone_dtoh(&dk)?),
        f(stream.clone_dtoh(&dv)?),
    );
    let (qf, kf, vf, dof) = (f(qh), f(kh), f(vh), f(doh));
    let (o_ref, _) = reference::forward(&shape, &qf, &kf, &vf, c.causal, None);
    let g = reference::backward(&shape, &qf, &kf, &vf, &dof, c.causal, None);
    Ok([
        rel_l2(&o, &o_ref),
        rel_l2(&dq, &g.dq),
        rel_l2(&dk, &g.dk),
        rel_l2(&dv, &g.dv),
    ])
}

fn check<T: Element>(
    rt: &FlashAttention,
    rng: &mut Rng,
    c: &Case,
    deterministic: bool,
    tol: f64,
) -> bool {
    let name = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("?");
    let mode = if deterministic { "det" } else { "atomic" };
    match run::<T>(rt, rng, c, deterministic) {
        Ok(errs) => {
            let ok = errs.iter().all(|e| *e <= tol);
            let [o, dq, dk, dv] = errs;
            println!(
                "{} d{} {name} causal={} {mode} sq{} sk{}: o {o:.2e} dq {dq:.2e} dk {dk:.2e} dv {dv:.2e}",
                if ok { "ok  " } else { "FAIL" },
                c.d,
                c.causal,
                c.sq,
                c.sk
            );
            ok
        }
        Err(e) => {
            println!("FAIL d{} {name}: {e}", c.d);
            false
        }
    }
}

fn main() {
    let rt = match FlashAttention::on_device(0) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("no GPU: {e}");
            std::process::exit(2);
        }
    };
    let mut rng = Rng::new(7);
    let mut ok = true;
    for d in [64, 128, 256] {
        for causal in [false, true] {
            // (300, 17) causal: the first query blocks see no key at all (the forward's
            // no-block epilogue path, with its barrier, under racecheck)
            for (sq, sk) in [(77, 131), (131, 77), (200, 200), (300, 17)] {
                let c = Case { d, causal, sq, sk };
                for deterministic in [false, true] {
                    ok &= check::<f16>(&rt, &mut rng, &c, deterministic, 1e-3);
                    ok &= check::<bf16>(&rt, &mut rng, &c, deterministic, 6e-3);
                }
            }
        }
    }
    // the long tiling (128 keys per CTA), 8192 queries over 130 keys: a partial last key
    // block, and under the causal mask key blocks that no query sees
    for causal in [false, true] {
        let c = Case {
            d: 128,
            causal,
            sq: 8192,
            sk: 130,
        };
        ok &= check::<bf16>(&rt, &mut rng, &c, false, 6e-3);
    }
    let long: Vec<String> = rt
        .loaded_specs()
        .iter()
        .map(|s| s.name())
        .filter(|n| n.contains("_long_"))
        .collect();
    println!("long-tiling kernels run: {long:?}");
    ok &= long.len() == 2;
    println!("{}", if ok { "ALL OK" } else { "SOME FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
