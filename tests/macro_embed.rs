//! What `flash_kernel!` embeds: exactly the variants asked for, each with the PTX that
//! `flash_codegen::generate` returns for its spec (the text `flash-codegen emit` writes),
//! byte for byte; with `arch = sm90a`, the sm_90a forwards with the PTX of
//! `manifest::sm90a::ptx` (what `flash-codegen emit --all --arch sm90a` writes).

use std::collections::BTreeSet;

use flash_ptx::codegen::kernels::sm90::fwd::Variant;
use flash_ptx::codegen::manifest::sm90a;
use flash_ptx::codegen::{KernelSpec, Mask, Pass, Scores, generate};
use flash_ptx::runtime::{EmbeddedKernel, EmbeddedSm90aKernel};

flash_ptx::flash_kernel! {
    /// Every pass, both dtypes, both mask variants, at the smallest and largest head dim.
    mod wide {
        head_dim = [32, 256],
        dtype = [f16, bf16],
        causal = [false, true],
        passes = [fwd, bwd],
        arch = sm80,
    }
}

flash_ptx::flash_kernel! {
    mod narrow { head_dim = 96, dtype = bf16, causal = true, passes = fwd }
}

flash_ptx::flash_kernel! {
    mod local { head_dim = [128, 256], dtype = bf16, causal = [false, true], passes = fwd_local }
}

flash_ptx::flash_kernel! {
    mod packed_local {
        head_dim = 64,
        dtype = f16,
        causal = false,
        passes = [varlen, varlen_local],
        softcap = [false, true],
    }
}

flash_ptx::flash_kernel! {
    mod decode_local {
        head_dim = 64,
        dtype = bf16,
        causal = false,
        passes = [kvcache_local, paged_local],
        softcap = [false, true],
    }
}

flash_ptx::flash_kernel! {
    mod capped {
        head_dim = 256,
        dtype = bf16,
        causal = true,
        passes = [fwd, fwd_local, bwd],
        softcap = [false, true],
    }
}

flash_ptx::flash_kernel! {
    /// Every sm_90a forward, and the sm_80 kernels of the same keys.
    mod hopper {
        head_dim = [64, 128],
        dtype = [f16, bf16],
        causal = [false, true],
        passes = [fwd, fwd_local],
        softcap = [false, true],
        alibi = [false, true],
        arch = [sm80, sm90a],
    }
}

flash_ptx::flash_kernel! {
    mod hopper_only { head_dim = 128, dtype = bf16, causal = true, passes = fwd, arch = sm90a }
}

fn names(kernels: &[EmbeddedKernel]) -> Vec<String> {
    kernels.iter().map(|k| k.spec().name()).collect()
}

#[test]
fn embedded_ptx_is_the_generators_byte_for_byte() {
    for k in wide::KERNELS
        .iter()
        .chain(narrow::KERNELS)
        .chain(local::KERNELS)
        .chain(packed_local::KERNELS)
        .chain(decode_local::KERNELS)
        .chain(capped::KERNELS)
        .chain(hopper::KERNELS)
    {
        let expected = generate(&k.spec());
        assert!(
            k.ptx().as_bytes() == expected.as_bytes(),
            "{}: embedded PTX ({} bytes) differs from flash_codegen::generate ({} bytes)",
            k.spec(),
            k.ptx().len(),
            expected.len()
        );
        assert!(k.ptx().contains(&format!(".entry {}(", k.spec().name())));
    }
}

/// The sm_90a forwards: each the shipping variant, its PTX byte for byte what
/// `flash-codegen emit --all --arch sm90a` writes (`manifest::sm90a::ptx` of
/// `manifest::sm90a::shipping()`), all 32 of them in that order.
#[test]
fn embedded_sm90a_ptx_is_the_emitters_byte_for_byte() {
    let vars: Vec<Variant> = hopper::SM90A_KERNELS.iter().map(|k| k.variant()).collect();
    assert_eq!(vars, sm90a::shipping());
    for k in hopper::SM90A_KERNELS
        .iter()
        .chain(hopper_only::SM90A_KERNELS)
    {
        let var = k.variant();
        assert_eq!(
            var,
            Variant::shipping_scored(var.dtype, var.head_dim, var.mask(), var.scores)
        );
        let expected = sm90a::ptx(var);
        assert!(
            k.ptx().as_bytes() == expected.as_bytes(),
            "{}: embedded PTX ({} bytes) differs from what emit writes ({} bytes)",
            k.name(),
            k.ptx().len(),
            expected.len()
        );
        assert!(k.ptx().contains(&format!(".entry {}(", k.name())));
    }
    // `[sm80, sm90a]` keeps the sm_80 kernels byte for byte (checked above) and the same
    // set as without sm90a
    assert_eq!(hopper::KERNELS.len(), 32);
    assert!(
        hopper::KERNELS
            .iter()
            .all(|k| k.ptx() == generate(&k.spec()))
    );
    // `sm90a` alone: only the sm_90a forward
    assert!(hopper_only::KERNELS.is_empty());
    let k: EmbeddedSm90aKernel = hopper_only::FA3_FWD_D128_BF16_CAUSAL_OVL_PP_M128_DYN_TST_SM90A;
    assert_eq!(hopper_only::SM90A_KERNELS, [k]);
}

#[test]
fn the_product_of_the_lists_in_spec_order() {
    // (`wide` takes passes = [fwd, bwd]: not the KV-cache, varlen or sliding-window kernels)
    let dense = |s: &KernelSpec| {
        !matches!(s.pass, Pass::FwdSplit | Pass::FwdCombine | Pass::FwdPaged)
            && !s.pass.is_varlen()
            && s.mask != Mask::Local
            && s.scores == Scores::Plain
    };
    let want: BTreeSet<KernelSpec> = KernelSpec::all()
        .into_iter()
        .filter(|s| [32, 256].contains(&s.head_dim) && dense(s))
        .collect();
    // 32 standard kernels, the grouped-query split's 4 bwdkvsum, plus the d256 forward's 4
    // compact ones and the d256 backward's 8 (bwd and bwddq) for 99 KiB GPUs (RTX 30/40)
    assert_eq!(wide::KERNELS.len(), 48);
    assert_eq!(
        wide::KERNELS
            .iter()
            .map(|k| k.spec())
            .collect::<BTreeSet<_>>(),
        want
    );
    let mut sorted = names(wide::KERNELS);
    sorted.sort_by_key(|n| n.parse::<KernelSpec>().unwrap());
    assert_eq!(names(wide::KERNELS), sorted);
    assert_eq!(names(narrow::KERNELS), ["fa2_fwd_d96_bf16_causal_sm80"]);
    // `fwd_local`: the sliding-window forward, whatever `causal` says (and its compact
    // tiling at d256)
    assert_eq!(
        names(local::KERNELS),
        [
            "fa2_fwd_d128_bf16_local_sm80",
            "fa2_fwd_d256_bf16_local_sm80",
            "fa2_fwd_d256_bf16_local_compact_sm80",
        ]
    );
    // `varlen_local`: the packed-sequence sliding-window forward; with `softcap`, the
    // softcap twin of each
    assert_eq!(
        names(packed_local::KERNELS),
        [
            "fa2_fwdvarlen_d64_f16_sm80",
            "fa2_fwdvarlen_d64_f16_softcap_sm80",
            "fa2_fwdvarlen_d64_f16_local_sm80",
            "fa2_fwdvarlen_d64_f16_local_softcap_sm80",
        ]
    );
    // `kvcache_local` / `paged_local`: the windowed split kernels in each tiling, plain and
    // softcapped, and the combine step (no mask, plain)
    let split: Vec<KernelSpec> = decode_local::KERNELS
        .iter()
        .map(|k| k.spec())
        .filter(|s| s.pass != Pass::FwdCombine)
        .collect();
    assert!(split.iter().all(|s| s.mask == Mask::Local), "{split:?}");
    for n in [
        "fa2_fwdsplit_d64_bf16_local_sm80",
        "fa2_fwdsplit_d64_bf16_local_softcap_long_sm80",
        "fa2_fwdpaged_d64_bf16_local_softcap_sm80",
        "fa2_fwdpaged_d64_bf16_local_long_sm80",
    ] {
        assert!(names(decode_local::KERNELS).iter().any(|k| k == n), "{n}");
    }
    assert!(
        decode_local::KERNELS
            .iter()
            .filter(|k| k.spec().pass == Pass::FwdCombine)
            .all(|k| k.spec().mask == Mask::None && k.spec().scores == Scores::Plain)
    );
    // `softcap = [false, true]`: the softcap twins of the passes that compute scores (the
    // forwards: no compact rows, the softcap rows fit 99 KiB)
    let capped: Vec<String> = names(capped::KERNELS)
        .into_iter()
        .filter(|n| n.starts_with("fa2_fwd_"))
        .collect();
    assert_eq!(
        capped,
        [
            "fa2_fwd_d256_bf16_causal_sm80",
            "fa2_fwd_d256_bf16_causal_compact_sm80",
            "fa2_fwd_d256_bf16_causal_softcap_sm80",
            "fa2_fwd_d256_bf16_local_sm80",
            "fa2_fwd_d256_bf16_local_compact_sm80",
            "fa2_fwd_d256_bf16_local_softcap_sm80",
        ]
    );
    // ... and of the backward's bwd and bwddq; bwdpre and bwdpost stay plain
    let scored = |p: Pass| matches!(p, Pass::Fwd | Pass::Bwd | Pass::BwdDq);
    assert!(
        capped::KERNELS
            .iter()
            .all(|k| scored(k.spec().pass) || k.spec().scores == Scores::Plain)
    );
    for n in [
        "fa2_bwd_d256_bf16_causal_softcap_sm80",
        "fa2_bwddq_d256_bf16_causal_softcap_sm80",
    ] {
        assert!(names(capped::KERNELS).iter().any(|k| k == n), "{n}");
    }
}

#[test]
fn typed_handles_name_their_kernel() {
    let k = wide::FA2_BWDDQ_D256_F16_CAUSAL_SM80;
    assert_eq!(k.spec().pass, Pass::BwdDq);
    assert_eq!(k.spec().name(), "fa2_bwddq_d256_f16_causal_sm80");
    assert_eq!(narrow::KERNELS[0], narrow::FA2_FWD_D96_BF16_CAUSAL_SM80);
}
