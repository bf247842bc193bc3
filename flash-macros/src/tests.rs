//! `expand` as a function: the expansion of a small invocation (snapshot, PTX redacted),
//! the variant product, and the errors' spans.

use proc_macro2::{Group, Literal, TokenStream, TokenTree};
use quote::quote;

use crate::expand::expand;
use crate::parse::parse;

/// `tokens` with every string literal longer than 200 bytes (the PTX) replaced by a
/// placeholder, so the snapshot stays small and does not change with the kernels; the
/// literals are pushed on `out`.
fn redact(tokens: TokenStream, out: &mut Vec<Literal>) -> TokenStream {
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), redact(g.stream(), out));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            TokenTree::Literal(l) if l.to_string().len() > 200 => {
                out.push(l);
                TokenTree::Literal(Literal::string("<ptx>"))
            }
            t => t,
        })
        .collect()
}

fn pretty(tokens: TokenStream) -> String {
    prettyplease::unparse(&syn::parse2(tokens).expect("the expansion is a valid file"))
}

#[test]
fn expansion_of_one_variant() {
    let out = expand(quote! {
        /// Docs pass through.
        pub(crate) mod attn { head_dim = 64, dtype = f16, causal = false, passes = fwd }
    })
    .unwrap();
    let mut ptx = Vec::new();
    insta::assert_snapshot!(pretty(redact(out, &mut ptx)));
    let spec = "fa2_fwd_d64_f16_sm80".parse().unwrap();
    let expected = Literal::string(&flash_codegen::generate(&spec));
    assert_eq!(ptx.len(), 1);
    assert!(
        ptx[0].to_string() == expected.to_string(),
        "the embedded PTX differs"
    );
}

#[test]
fn lists_make_the_product_and_bwd_brings_every_backward_kernel() {
    let input = parse(quote! {
        mod m {
            head_dim = [64, 128], dtype = [f16, bf16], causal = [false, true],
            passes = [fwd, bwd], arch = sm80,
        }
    })
    .unwrap();
    let names: Vec<String> = input.specs.iter().map(|s| s.name()).collect();
    // Per head dim and dtype: fwd x2, bwdpre, bwd x2, bwddq x2, bwdpost, bwdkvsum; d128's
    // bwd also in its long and its compact tiling, d64's in its compact one (x2 causal
    // each: the rows for less shared memory per block or per SM).
    assert_eq!(names.len(), 2 * 2 * 9 + 2 * 2 * 2 + 2 * 2);
    assert!(names.contains(&"fa2_bwd_d64_bf16_causal_compact_sm80".to_string()));
    assert!(names.contains(&"fa2_bwd_d128_f16_causal_long_sm80".to_string()));
    assert!(names.contains(&"fa2_bwd_d128_bf16_compact_sm80".to_string()));
    assert!(
        !names
            .iter()
            .any(|n| n.contains("d64") && n.contains("long"))
    );
    assert_eq!(names.first().unwrap(), "fa2_fwd_d64_f16_sm80");
    assert!(names.contains(&"fa2_bwdpre_d128_bf16_sm80".to_string()));
    assert!(names.contains(&"fa2_bwddq_d64_f16_causal_sm80".to_string()));
    assert!(
        !names
            .iter()
            .any(|n| n.contains("bwdpre") && n.contains("causal"))
    );
    assert_eq!(names.last().unwrap(), "fa2_bwdkvsum_d128_bf16_sm80");
}

#[test]
fn trailing_commas_and_single_item_lists_are_fine() {
    let input = parse(quote! {
        mod m { head_dim = [256,], dtype = [bf16], causal = true, passes = [bwd], }
    })
    .unwrap();
    let names: Vec<String> = input.specs.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "fa2_bwdpre_d256_bf16_sm80",
            "fa2_bwd_d256_bf16_causal_sm80",
            "fa2_bwd_d256_bf16_causal_compact_sm80",
            "fa2_bwddq_d256_bf16_causal_sm80",
            "fa2_bwddq_d256_bf16_causal_compact_sm80",
            "fa2_bwdpost_d256_bf16_sm80",
            "fa2_bwdkvsum_d256_bf16_sm80",
        ]
    );
}

/// Spans are pinned by the trybuild tests (tests/ui); here, the messages.
#[test]
fn errors_say_what_is_wrong() {
    let cases = [
        (
            quote!(mod m { head_dim = 80, dtype = f16, causal = false, passes = fwd }),
            "unsupported head_dim 80",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = [f16, fp8], causal = false, passes = fwd }),
            "unknown dtype `fp8`",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = [], passes = fwd }),
            "`causal` needs at least one value",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = yes, passes = fwd }),
            "expected `true` or `false`",
        ),
        (
            quote!(mod m { head_dim = [64, 64], dtype = f16, causal = false, passes = fwd }),
            "this value is already in the list",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = false, passes = fwd, arch = sm90 }),
            "unknown arch `sm90`",
        ),
        (
            quote!(mod m { head_dim = [64, 96], dtype = f16, causal = false, passes = fwd,
                           arch = sm90a }),
            "head_dim 96 has no sm_90a kernel: `arch = sm90a` embeds the sm_90a forward",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = false, passes = [fwd, bwd],
                           arch = sm90a }),
            "pass `bwd` has no sm_90a kernel",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = false, passes = fwd_local,
                           arch = sm90a, alibi = true }),
            "`sm90a` embeds nothing here (ALiBi has no sliding-window kernel)",
        ),
        (
            quote!(mod m { head_dim = 96, dtype = f16, causal = false, passes = fwd,
                           arch = [sm80, sm90a] }),
            "`sm90a` embeds nothing here (no head dim 64 or 128)",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = false, passes = bwd,
                           arch = [sm80, sm90a] }),
            "`sm90a` embeds nothing here (no `fwd` or `fwd_local` in `passes`)",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16, causal = false, passes = fwd,
                           arch = [sm90a, sm90a] }),
            "this value is already in the list",
        ),
        (
            quote!(mod m { head_dim = 64, dtype = f16 }),
            "flash_kernel! module `m` is missing `causal`, `passes`",
        ),
    ];
    for (tokens, msg) in cases {
        match parse(tokens) {
            Ok(_) => panic!("expected an error: {msg}"),
            Err(e) => assert!(e.to_string().starts_with(msg), "{e}"),
        }
    }
}

/// `paged` brings the paged split-KV forward in each of fwdsplit's tilings and the same
/// combine kernels; with `kvcache` the combine kernels come once.
#[test]
fn paged_brings_the_paged_forward_and_the_combine() {
    let input = parse(quote! {
        mod m { head_dim = 64, dtype = f16, causal = false, passes = [kvcache, paged], }
    })
    .unwrap();
    let names: Vec<String> = input.specs.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "fa2_fwdsplit_d64_f16_sm80",
            "fa2_fwdsplit_d64_f16_long_sm80",
            "fa2_fwdsplit_d64_f16_compact_sm80",
            "fa2_fwdcombine_d64_f16_sm80",
            "fa2_fwdcombine_d64_f16_long_sm80",
            "fa2_fwdcombine_d64_f16_prefill_sm80",
            "fa2_fwdpaged_d64_f16_sm80",
            "fa2_fwdpaged_d64_f16_long_sm80",
            "fa2_fwdpaged_d64_f16_compact_sm80",
        ]
    );
}

/// `kvcache` brings the split-KV forward in each of its tilings (key-split, long, compact,
/// and prefill at d128)
/// and its combine step in each of its three (4 and 8 warps a row, a row per warp; no
/// causal variant).
#[test]
fn kvcache_brings_the_split_forward_and_its_combine() {
    let input = parse(quote! {
        mod m { head_dim = 128, dtype = bf16, causal = [false, true], passes = kvcache, }
    })
    .unwrap();
    let names: Vec<String> = input.specs.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "fa2_fwdsplit_d128_bf16_sm80",
            "fa2_fwdsplit_d128_bf16_long_sm80",
            "fa2_fwdsplit_d128_bf16_compact_sm80",
            "fa2_fwdsplit_d128_bf16_prefill_sm80",
            "fa2_fwdsplit_d128_bf16_causal_sm80",
            "fa2_fwdsplit_d128_bf16_causal_long_sm80",
            "fa2_fwdsplit_d128_bf16_causal_compact_sm80",
            "fa2_fwdsplit_d128_bf16_causal_prefill_sm80",
            "fa2_fwdcombine_d128_bf16_sm80",
            "fa2_fwdcombine_d128_bf16_long_sm80",
            "fa2_fwdcombine_d128_bf16_prefill_sm80",
        ]
    );
}

/// `alibi = true` brings the ALiBi kernels of every pass that computes scores;
/// the passes without scores stay plain, so a softcap-only or ALiBi-only list still has
/// every kernel its calls launch; softcap and ALiBi at once has no kernel.
#[test]
fn alibi_brings_its_kernels_and_the_plain_helpers() {
    let input = parse(quote! {
        mod m { head_dim = 64, dtype = bf16, causal = true, passes = [fwd, bwd, varlen, kvcache],
                alibi = true }
    })
    .unwrap();
    let names: Vec<String> = input.specs.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "fa2_fwd_d64_bf16_causal_alibi_sm80",
            "fa2_bwdpre_d64_bf16_sm80",
            "fa2_bwd_d64_bf16_causal_alibi_sm80",
            "fa2_bwd_d64_bf16_causal_alibi_compact_sm80",
            "fa2_bwddq_d64_bf16_causal_alibi_sm80",
            "fa2_bwdpost_d64_bf16_sm80",
            "fa2_bwdkvsum_d64_bf16_sm80",
            // (kvcache: no prefill row under ALiBi; the combine plain)
            "fa2_fwdsplit_d64_bf16_causal_alibi_sm80",
            "fa2_fwdsplit_d64_bf16_causal_alibi_long_sm80",
            "fa2_fwdsplit_d64_bf16_causal_alibi_compact_sm80",
            "fa2_fwdcombine_d64_bf16_sm80",
            "fa2_fwdcombine_d64_bf16_long_sm80",
            "fa2_fwdcombine_d64_bf16_prefill_sm80",
            "fa2_fwdvarlen_d64_bf16_causal_alibi_sm80",
        ]
    );
    let capped = parse(quote! {
        mod m { head_dim = 64, dtype = f16, causal = false, passes = kvcache, softcap = true }
    })
    .unwrap();
    let names: Vec<String> = capped.specs.iter().map(|s| s.name()).collect();
    assert!(
        names.contains(&"fa2_fwdcombine_d64_f16_sm80".to_string()),
        "{names:?}"
    );
    let both = parse(quote! {
        mod m { head_dim = 64, dtype = f16, causal = false, passes = fwd, softcap = true,
                alibi = true }
    });
    let err = both.err().expect("softcap and alibi at once").to_string();
    assert!(err.contains("no kernel computes both"), "{err}");
}

/// `arch` is literal: `sm90a` alone embeds only the sm_90a forwards (the shipping
/// variant of each dtype, head dim, mask and score transform), `[sm80, sm90a]` both, and
/// no `arch` the sm_80 kernels only.
#[test]
fn arch_sm90a_embeds_the_shipping_forwards() {
    use flash_codegen::kernels::sm90::fwd::Variant;
    use flash_codegen::{DType, Scores};

    let only = parse(quote! {
        mod m { head_dim = [64, 128], dtype = [f16, bf16], causal = [false, true],
                passes = [fwd, fwd_local], softcap = [false, true], alibi = [false, true],
                arch = sm90a }
    })
    .unwrap();
    assert!(only.specs.is_empty());
    assert_eq!(only.sm90a, flash_codegen::manifest::sm90a::shipping());
    // the plain ones alone without the flags; ALiBi has no window kernel
    let plain = parse(quote! {
        mod m { head_dim = [64, 128], dtype = [f16, bf16], causal = [false, true],
                passes = [fwd, fwd_local], arch = sm90a }
    })
    .unwrap();
    let of = |s: Scores| -> Vec<Variant> {
        let all = flash_codegen::manifest::sm90a::shipping();
        all.into_iter().filter(|v| v.scores == s).collect()
    };
    assert_eq!(plain.sm90a, of(Scores::Plain));
    let alibi = parse(quote! {
        mod m { head_dim = 64, dtype = bf16, causal = [false, true], passes = [fwd, fwd_local],
                alibi = true, arch = sm90a }
    })
    .unwrap();
    let names: Vec<String> = alibi.sm90a.iter().map(Variant::name).collect();
    assert_eq!(
        names,
        [
            "fa3_fwd_d64_bf16_alibi_ovl_pp_m192_dyn_tst_sm90a",
            "fa3_fwd_d64_bf16_causal_alibi_ovl_pp_m192_dyn_tst_sm90a"
        ]
    );

    let both = parse(quote! {
        mod m { head_dim = [64, 96], dtype = bf16, causal = true, passes = [fwd, bwd],
                arch = [sm80, sm90a] }
    })
    .unwrap();
    // sm_90a: the forward at d64 only (d96 and bwd have none); sm_80: everything
    assert_eq!(both.sm90a, [Variant::shipping(DType::Bf16, 64, true)]);
    let sm80 = parse(quote! {
        mod m { head_dim = [64, 96], dtype = bf16, causal = true, passes = [fwd, bwd] }
    })
    .unwrap();
    assert!(sm80.sm90a.is_empty());
    assert_eq!(both.specs, sm80.specs);

    // the expansion: a typed constant per forward, SM90A_KERNELS, and the runtime
    // constructors register them
    let out = expand(quote! {
        mod m { head_dim = 128, dtype = f16, causal = false, passes = fwd, arch = sm90a }
    })
    .unwrap();
    let mut ptx = Vec::new();
    let text = pretty(redact(out, &mut ptx));
    let var = Variant::shipping(DType::F16, 128, false);
    let name = var.name();
    let konst = format!(
        "pub const {}: ::flash_ptx::runtime::EmbeddedSm90aKernel",
        name.to_uppercase()
    );
    assert!(text.contains(&konst), "{text}");
    assert!(
        text.contains("pub static KERNELS: &[::flash_ptx::runtime::EmbeddedKernel] = &[];"),
        "{text}"
    );
    assert!(
        text.contains("rt.register_sm90a_kernels(SM90A_KERNELS)"),
        "{text}"
    );
    assert_eq!(ptx.len(), 1);
    let expected = Literal::string(&flash_codegen::manifest::sm90a::ptx(var));
    assert!(
        ptx[0].to_string() == expected.to_string(),
        "the embedded PTX differs"
    );
}
