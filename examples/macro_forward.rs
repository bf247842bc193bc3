//! `flash_kernel!` on the GPU: kernels generated at compile time, PTX embedded, run by a
//! runtime that never generates code.
//!
//! One forward and one backward of a causal head-dim-56 problem (it runs on the embedded
//! `head_dim = 64` kernels), checked against the CPU float64 reference; then a head-dim-128
//! call, which this module does not embed, fails with `FlashError::KernelNotEmbedded`.
//! Exits non-zero on any mismatch.
//!
//! ```sh
//! cargo run --release --features gpu --example macro_forward
//! ```

use std::error::Error;

use flash_ptx::runtime::reference::{self, Shape, rel_l2};
use flash_ptx::runtime::rng::Rng;
use flash_ptx::runtime::{AttnParams, BwdInputs, BwdOptions, FlashAttention, FlashError, Tensor4};
use half::bf16;

flash_ptx::flash_kernel! {
    /// The kernels this program runs: bf16, head dim 64 (problems of head dim 40 to 64),
    /// both mask variants, forward and backward.
    mod attn {
        head_dim = 64,
        dtype = bf16,
        causal = [false, true],
        passes = [fwd, bwd],
    }
}

const TOL: f64 = 1e-2;

fn main() {
    if let Err(e) = run() {
        eprintln!("macro_forward: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    println!("embedded: {} kernels", attn::KERNELS.len());
    let rt: FlashAttention = attn::on_device(0)?;
    assert!(!rt.generates_on_demand());
    let stream = rt.context().default_stream();

    let shape = Shape {
        batch: 2,
        seqlen_q: 200,
        seqlen_k: 333,
        heads: 4,
        heads_k: 2,
        head_dim: 56,
    };
    let [b, sq, sk, h, hk, d] = [
        shape.batch,
        shape.seqlen_q,
        shape.seqlen_k,
        shape.heads,
        shape.heads_k,
        shape.head_dim,
    ];
    let mut rng = Rng::new(7);
    let mut rand =
        |n: usize| -> Vec<bf16> { (0..n).map(|_| bf16::from_f32(rng.normal())).collect() };
    let (q, k, v, d_o) = (
        rand(shape.q_len()),
        rand(shape.kv_len()),
        rand(shape.kv_len()),
        rand(shape.q_len()),
    );
    let (q_d, k_d, v_d, do_d) = (
        stream.clone_htod(&q)?,
        stream.clone_htod(&k)?,
        stream.clone_htod(&v)?,
        stream.clone_htod(&d_o)?,
    );
    let (qs, ks) = ([b, sq, h, d], [b, sk, hk, d]);
    let (tq, tk, tv, tdo) = (
        Tensor4::contiguous(&q_d, qs),
        Tensor4::contiguous(&k_d, ks),
        Tensor4::contiguous(&v_d, ks),
        Tensor4::contiguous(&do_d, qs),
    );
    let params = AttnParams::causal(); // the forward's and the backward's
    let fwd = rt.forward(&stream, &tq, &tk, &tv, &params)?;
    let (want_o, _) = reference::forward(&shape, &q, &k, &v, true, None);
    let err_o = rel_l2(&stream.clone_dtoh(&fwd.o)?, &want_o);
    println!("forward  d{d} causal: rel_l2(o) = {err_o:.2e}");

    let inputs = BwdInputs {
        q: &tq,
        k: &tk,
        v: &tv,
        o: &fwd.o(),
        lse: &fwd.lse(),
        d_o: &tdo,
    };
    let grads = rt.backward(&stream, inputs, &params, &BwdOptions::default())?;
    let want = reference::backward(&shape, &q, &k, &v, &d_o, true, None);
    let errs = [
        ("dq", rel_l2(&stream.clone_dtoh(&grads.dq)?, &want.dq)),
        ("dk", rel_l2(&stream.clone_dtoh(&grads.dk)?, &want.dk)),
        ("dv", rel_l2(&stream.clone_dtoh(&grads.dv)?, &want.dv)),
    ];
    for (name, e) in errs {
        println!("backward d{d} causal: rel_l2({name}) = {e:.2e}");
    }
    for (name, e) in [("o", err_o)].into_iter().chain(errs) {
        if e.is_nan() || e > TOL {
            return Err(format!("{name}: rel_l2 {e:.2e} above {TOL:.0e}").into());
        }
    }
    let loaded: Vec<String> = rt.loaded_specs().iter().map(|s| s.name()).collect();
    println!("loaded (all embedded): {loaded:?}");
    assert!(
        rt.loaded_specs()
            .iter()
            .all(|s| attn::KERNELS.iter().any(|k| k.spec() == *s))
    );

    // Head dim 128 is not in `attn`: a typed error that says what to add, no launch.
    let big = [1, 16, 1, 128];
    let x = stream.alloc_zeros::<bf16>(16 * 128)?;
    let t = Tensor4::contiguous(&x, big);
    let res = rt.forward(&stream, &t, &t, &t, &params);
    match res {
        Err(e @ FlashError::KernelNotEmbedded { .. }) => println!("d128 refused: {e}"),
        other => return Err(format!("expected KernelNotEmbedded, got {other:?}").into()),
    }
    stream.synchronize()?;
    println!("ok");
    Ok(())
}
