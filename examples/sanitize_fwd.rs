//! Runs the d64 and d128 forward kernels once per dtype and mask on odd shapes, for
//! `compute-sanitizer --tool memcheck` / `--tool racecheck` (GPU machine, feature `gpu`).
//! Checks each result against the CPU reference too; exits non-zero on any failure.

use flash_runtime::reference::{self, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::{Element, FlashAttention, FwdParams, Tensor4, Tensor4Mut};
use half::{bf16, f16};

fn case<T: Element>(rt: &FlashAttention, rng: &mut Rng, d: usize, causal: bool, sq: usize, sk: usize) -> bool
where
    T: Copy,
{
    let (b, h, hk) = (2, 4, 2);
    let stream = rt.context().default_stream();
    let gauss = |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal()).collect() };
    let (qf, kf, vf) = (gauss(rng, b * sq * h * d), gauss(rng, b * sk * hk * d), gauss(rng, b * sk * hk * d));
    let to_t = |x: &[f32]| -> Vec<T> { x.iter().map(|&v| T::from_f32(v)).collect() };
    let (qh, kh, vh) = (to_t(&qf), to_t(&kf), to_t(&vf));
    let back = |x: &[T]| -> Vec<f32> { x.iter().map(|v| v.to_f32()).collect() };
    let run = || -> flash_runtime::Result<(Vec<T>, Vec<f32>)> {
        let q = stream.clone_htod(&qh)?;
        let k = stream.clone_htod(&kh)?;
        let v = stream.clone_htod(&vh)?;
        let mut o = stream.clone_htod(&vec![T::from_f32(f32::NAN); b * sq * h * d])?;
        let mut lse = stream.clone_htod(&vec![f32::NAN; b * h * sq])?;
        rt.forward(
            &stream,
            &Tensor4::contiguous(&q, [b, sq, h, d]),
            &Tensor4::contiguous(&k, [b, sk, hk, d]),
            &Tensor4::contiguous(&v, [b, sk, hk, d]),
            &mut Tensor4Mut::contiguous(&mut o, [b, sq, h, d]),
            Some(&mut lse),
            &FwdParams { causal, ..Default::default() },
        )?;
        Ok((stream.clone_dtoh(&o)?, stream.clone_dtoh(&lse)?))
    };
    match run() {
        Ok((o, lse)) => {
            let shape = reference::Shape { batch: b, seqlen_q: sq, seqlen_k: sk, heads: h, heads_k: hk, head_dim: d };
            let (o_ref, _lse_ref) =
                reference::forward(&shape, &back(&qh), &back(&kh), &back(&vh), causal, None);
            let err = rel_l2(&back(&o), &o_ref);
            let ok = err < 3e-3 && !lse.iter().any(|x| x.is_nan());
            println!("{} d{d} causal={causal} sq{sq} sk{sk} {}: rel_l2 {err:.2e}", if ok { "ok  " } else { "FAIL" }, std::any::type_name::<T>());
            ok
        }
        Err(e) => {
            println!("FAIL d{d} causal={causal}: {e}");
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
    for d in [64, 128] {
        for causal in [false, true] {
            for (sq, sk) in [(77, 131), (131, 77), (200, 200)] {
                ok &= case::<f16>(&rt, &mut rng, d, causal, sq, sk);
                ok &= case::<bf16>(&rt, &mut rng, d, causal, sq, sk);
            }
        }
    }
    println!("{}", if ok { "ALL OK" } else { "SOME FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
