//! GPU (feature `gpu`, compute capability 9.0): `flash_kernel!`'s `arch = sm90a` in an
//! embedded-only runtime. With `[sm80, sm90a]` embedded, `ForwardArch::Auto` names and
//! runs the sm_90a forward, bit for bit as a generating runtime (the same kernel, the
//! same PTX; softcapped too), and the sm_80 kernel where the sm_90a one cannot run (d96);
//! with only sm80 embedded it stays on sm_80 and forced `Sm90a` says the kernel is
//! missing; with only sm90a embedded a call it cannot run fails with `KernelNotEmbedded` for the
//! sm_80 kernel, and `launch_fwd_sm90` of a missing variant with
//! `Sm90aKernelNotEmbedded`. Other GPUs: a notice.
#![cfg(feature = "gpu")]

use std::sync::Arc;

use flash_runtime::cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::half::bf16;
use flash_runtime::{AttnParams, FlashAttention, FlashError, ForwardArch, Mask, Tensor4};

flash_ptx::flash_kernel! {
    mod both {
        head_dim = [96, 128], dtype = bf16, causal = [false, true], passes = fwd,
        softcap = [false, true], arch = [sm80, sm90a],
    }
}

flash_ptx::flash_kernel! {
    mod sm80_only { head_dim = 128, dtype = bf16, causal = [false, true], passes = fwd }
}

flash_ptx::flash_kernel! {
    mod sm90a_only { head_dim = 128, dtype = bf16, causal = [false, true], passes = fwd, arch = sm90a }
}

const B: usize = 2;
const S: usize = 333;
const H: usize = 4;

/// q, k, v `[B, S, H, d]` of deterministic values in [-1, 1).
fn inputs(stream: &Arc<CudaStream>, d: usize) -> [CudaSlice<bf16>; 3] {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ d as u64;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        bf16::from_f32(((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
    };
    let mut t = || {
        let host: Vec<bf16> = (0..B * S * H * d).map(|_| next()).collect();
        stream.clone_htod(&host).expect("upload")
    };
    [t(), t(), t()]
}

/// The kernel `rt` names for a d-dim call under `p`, and its o (None for an error).
fn run(
    rt: &FlashAttention,
    stream: &Arc<CudaStream>,
    d: usize,
    p: &AttnParams,
) -> Result<(String, Vec<bf16>), FlashError> {
    let [q, k, v] = inputs(stream, d);
    let shape = [B, S, H, d];
    let (q, k, v) = (
        Tensor4::contiguous(&q, shape),
        Tensor4::contiguous(&k, shape),
        Tensor4::contiguous(&v, shape),
    );
    let name = rt
        .forward_kernel_name(stream, &q, &k, &v, p)?
        .expect("a non-empty call");
    let out = rt.forward(stream, &q, &k, &v, p)?;
    Ok((name, stream.clone_dtoh(&out.o).expect("download")))
}

#[test]
fn embedded_sm90a_forwards_run_on_compute_capability_9_0() {
    let generating = FlashAttention::on_device(0).unwrap_or_else(|e| panic!("needs a GPU: {e}"));
    if generating.compute_capability() != (9, 0) {
        println!(
            "NOTICE: compute capability {:?}: the sm_90a forward runs on 9.0 only; skipped",
            generating.compute_capability()
        );
        return;
    }
    let stream = generating.context().default_stream();
    let ctx = generating.context().clone();
    let causal = AttnParams::new().with_mask(Mask::Causal);
    let plain = AttnParams::new();

    // [sm80, sm90a]: Auto runs the embedded sm_90a forward, bit for bit the generated one
    let rt = both::runtime(ctx.clone()).unwrap();
    assert!(!rt.generates_on_demand());
    let capped = [plain.with_softcap(30.0), causal.with_softcap(30.0)];
    for p in [&plain, &causal, &capped[0], &capped[1]] {
        let (name, o) = run(&rt, &stream, 128, p).unwrap();
        let (gen_name, gen_o) = run(&generating, &stream, 128, p).unwrap();
        assert!(name.ends_with("_sm90a"), "{name}");
        assert_eq!(name, gen_name);
        assert!(
            o == gen_o,
            "{name}: the embedded kernel's o differs from the generated one's"
        );
    }
    // ... and the sm_80 kernels where the sm_90a one cannot
    let (name, _) = run(&rt, &stream, 96, &causal).unwrap();
    assert_eq!(name, "fa2_fwd_d96_bf16_causal_sm80");
    let (name, _) = run(&rt, &stream, 96, &plain.with_softcap(30.0)).unwrap();
    assert_eq!(name, "fa2_fwd_d96_bf16_softcap_sm80");

    // sm80 only: stays on sm_80; forced Sm90a names the missing kernel
    let mut rt = sm80_only::runtime(ctx.clone()).unwrap();
    let (name, _) = run(&rt, &stream, 128, &causal).unwrap();
    assert_eq!(name, "fa2_fwd_d128_bf16_causal_sm80");
    rt.set_forward_arch(ForwardArch::Sm90a);
    let e = run(&rt, &stream, 128, &causal).unwrap_err();
    assert!(matches!(e, FlashError::ArchUnavailable { .. }), "{e}");
    assert!(e.to_string().contains("add `arch = [sm80, sm90a]`"), "{e}");

    // sm90a only: the forward it embeds runs; the rest is KernelNotEmbedded (sm_80)
    let rt = sm90a_only::runtime(ctx).unwrap();
    let (name, _) = run(&rt, &stream, 128, &causal).unwrap();
    assert!(name.ends_with("_sm90a"), "{name}");
    let e = run(&rt, &stream, 128, &causal.with_softcap(30.0)).unwrap_err();
    assert!(
        matches!(e, FlashError::KernelNotEmbedded { spec } if spec.name() == "fa2_fwd_d128_bf16_causal_softcap_sm80"),
        "{e}"
    );

    // launch_fwd_sm90 of a variant not registered: a typed error, no generation
    let rt = sm80_only::runtime(generating.context().clone()).unwrap();
    let [q, k, v] = inputs(&stream, 64);
    let mut o = stream.alloc_zeros::<bf16>(B * S * H * 64).unwrap();
    let sh = flash_runtime::Sm90FwdShape {
        batch: B,
        seqlen_q: S,
        seqlen_k: S,
        heads: H,
        heads_k: H,
        head_dim: 64,
        causal: false,
        window: None,
        scores: flash_codegen::Scores::Plain,
        fma_exp2: None,
        overlap: true,
        pingpong: true,
        consumers: None,
        persistent: false,
        dynamic: false,
        chained: false,
        tma_store: false,
        q_ahead: false,
        fixed_ref: false,
        edge_masks: false,
        debug: false,
    };
    let e = rt
        .launch_fwd_sm90(&stream, sh, &q, &k, &v, &mut o, None)
        .unwrap_err();
    assert!(
        matches!(e, FlashError::Sm90aKernelNotEmbedded { .. }),
        "{e}"
    );
}
