//! Input layer: `flash_kernel!`'s `mod NAME { key = value, ... }`, parsed and checked
//! with a span on every error.

use std::collections::BTreeSet;

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Scores, Tiling};
use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Ident, Lit, Result, Token, Visibility, braced, bracketed};

use crate::values::{Atom, Passes, Target, arch, causal, dtype, each, head_dim, passes};

/// The keys, in the order the docs give them. `arch` is the only optional one.
const KEYS: [&str; 7] = [
    "head_dim", "dtype", "causal", "passes", "arch", "softcap", "alibi",
];

/// A parsed invocation: the module to emit and the kernel variants it embeds.
pub struct Input {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub ident: Ident,
    pub specs: BTreeSet<KernelSpec>,
    /// The sm_90a forwards (`arch = sm90a`), in `manifest::sm90a::shipping` order.
    pub sm90a: Vec<fwd::Variant>,
}

impl Parse for Atom {
    fn parse(input: ParseStream) -> Result<Self> {
        if input.peek(Lit) {
            Ok(Atom::Lit(input.parse()?))
        } else if input.peek(Ident) {
            Ok(Atom::Word(input.parse()?))
        } else {
            Err(input.error("expected a value: an integer, `true`/`false` or a name"))
        }
    }
}

/// `key = atom` or `key = [atom, ...]` (`list` holds the brackets' span).
pub(crate) struct Entry {
    pub(crate) key: Ident,
    list: Option<Span>,
    pub(crate) values: Vec<Atom>,
}

impl Parse for Entry {
    fn parse(input: ParseStream) -> Result<Self> {
        let key: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        if input.peek(syn::token::Bracket) {
            let content;
            let brackets = bracketed!(content in input);
            let values = Punctuated::<Atom, Token![,]>::parse_terminated(&content)?;
            Ok(Entry {
                key,
                list: Some(brackets.span.join()),
                values: values.into_iter().collect(),
            })
        } else {
            Ok(Entry {
                key,
                list: None,
                values: vec![input.parse()?],
            })
        }
    }
}

impl Parse for Input {
    fn parse(input: ParseStream) -> Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        if !input.peek(Token![mod]) {
            return Err(input.error(
                "expected `mod NAME { ... }`, e.g. `flash_kernel! { pub mod attn { head_dim = \
                 128, dtype = bf16, causal = [false, true], passes = [fwd, bwd] } }`",
            ));
        }
        input.parse::<Token![mod]>()?;
        let ident: Ident = input.parse()?;
        let content;
        braced!(content in input);
        let entries = Punctuated::<Entry, Token![,]>::parse_terminated(&content)?;
        if !input.is_empty() {
            return Err(
                input.error("unexpected tokens after the module: one module per invocation")
            );
        }
        let (specs, sm90a) = specs(&ident, entries.into_iter().collect())?;
        Ok(Input {
            attrs,
            vis,
            ident,
            specs,
            sm90a,
        })
    }
}

/// The checked values of every key.
pub(crate) struct Args {
    pub(crate) head_dims: Vec<u32>,
    pub(crate) dtypes: Vec<DType>,
    pub(crate) causal: Vec<bool>,
    pub(crate) passes: Vec<Passes>,
    pub(crate) arch: Vec<Target>,
    /// Plain scores, softcap and ALiBi where `softcap = true`, `alibi = true` ask for them.
    pub(crate) scores: Vec<Scores>,
}

/// Check every entry and make the product of the values: the sm_80 kernels and the sm_90a
/// forwards.
fn specs(module: &Ident, entries: Vec<Entry>) -> Result<(BTreeSet<KernelSpec>, Vec<fwd::Variant>)> {
    let mut seen: Vec<&Ident> = Vec::new();
    for e in &entries {
        let key = e.key.to_string();
        if !KEYS.contains(&key.as_str()) {
            let msg = format!(
                "unknown key `{key}`: flash_kernel! takes head_dim, dtype, causal, passes \
                 and (optional) arch, softcap and alibi (true or false)"
            );
            return Err(Error::new(e.key.span(), msg));
        }
        if let Some(first) = seen.iter().find(|k| **k == &e.key) {
            let mut err = Error::new(e.key.span(), format!("duplicate key `{key}`"));
            err.combine(Error::new(
                first.span(),
                format!("`{key}` first given here"),
            ));
            return Err(err);
        }
        seen.push(&e.key);
        if let (Some(span), true) = (e.list, e.values.is_empty()) {
            return Err(Error::new(
                span,
                format!("`{key}` needs at least one value"),
            ));
        }
    }
    let missing: Vec<String> = KEYS[..4]
        .iter()
        .filter(|k| !seen.iter().any(|s| s == k))
        .map(|k| format!("`{k}`"))
        .collect();
    if !missing.is_empty() {
        let msg = format!(
            "flash_kernel! module `{module}` is missing {}: e.g. `head_dim = 128, dtype = bf16, \
             causal = [false, true], passes = [fwd, bwd]`",
            missing.join(", ")
        );
        return Err(Error::new(module.span(), msg));
    }
    let values = |key: &str| {
        &entries
            .iter()
            .find(|e| e.key == key)
            .expect("checked")
            .values
    };
    let args = Args {
        head_dims: each(values("head_dim"), head_dim)?,
        dtypes: each(values("dtype"), dtype)?,
        causal: each(values("causal"), causal)?,
        passes: each(values("passes"), passes)?,
        arch: match entries.iter().find(|e| e.key == "arch") {
            Some(e) => each(&e.values, arch)?,
            None => vec![Target::Sm80(Arch::Sm80)],
        },
        scores: scores(&entries)?,
    };
    let sm90a = crate::sm90a::variants(&entries, &args)?;
    Ok((product(&args), sm90a))
}

/// The score transforms `softcap` and `alibi` ask for (default plain); both on at once
/// has no kernel.
fn scores(entries: &[Entry]) -> Result<Vec<Scores>> {
    let flag = |key: &str| match entries.iter().find(|e| e.key == key) {
        Some(e) => each(&e.values, causal).map(|v| (v, Some(e.key.span()))),
        None => Ok((vec![false], None)),
    };
    let ((caps, _), (alibis, alibi_span)) = (flag("softcap")?, flag("alibi")?);
    let mut out = Vec::new();
    for &cap in &caps {
        for &alibi in &alibis {
            out.extend(match (cap, alibi) {
                (false, false) => Some(Scores::Plain),
                (true, false) => Some(Scores::Softcap),
                (false, true) => Some(Scores::Alibi),
                (true, true) => None, // (no kernel computes both)
            });
        }
    }
    match (out.is_empty(), alibi_span) {
        (true, Some(span)) => Err(Error::new(
            span,
            "`softcap = true` with `alibi = true`: no kernel computes both; give one of them \
             `[false, true]` or drop it",
        )),
        _ => Ok(out),
    }
}

/// Every combination. `bwd` brings each backward kernel of both modes (atomic: bwdpre,
/// bwd, bwdpost; deterministic: bwdpre, bwd, bwddq), with the bwd's long-sequence
/// tiling where it has one (d128); bwdpre and bwdpost have no causal variant, so they
/// come once per head dim and dtype. `kvcache` brings the split-KV forward and its
/// combine step (no causal variant); `paged` the paged split-KV forward and the same
/// combine step; `varlen` and `varlen_bwd` the packed-sequence forward and backward;
/// `fwd_local`, `varlen_local`, `kvcache_local` and `paged_local` the sliding-window
/// forwards, `bwd_local` and `varlen_bwd_local` the backwards (the window is a runtime
/// parameter, so `causal` does not change them; the combine step, bwdpre and bwdpost
/// have no mask).
fn product(a: &Args) -> BTreeSet<KernelSpec> {
    let mut specs = BTreeSet::new();
    for arch in a.arch.iter().filter_map(|t| t.sm80()) {
        for &head_dim in &a.head_dims {
            for &dtype in &a.dtypes {
                for &causal in &a.causal {
                    for &p in &a.passes {
                        let passes: &[Pass] = match p {
                            Passes::Fwd | Passes::FwdLocal => &[Pass::Fwd],
                            Passes::Bwd | Passes::BwdLocal => &[
                                Pass::BwdPre,
                                Pass::Bwd,
                                Pass::BwdDq,
                                Pass::BwdPost,
                                Pass::BwdKvSum,
                            ],
                            Passes::KvCache | Passes::KvCacheLocal => {
                                &[Pass::FwdSplit, Pass::FwdCombine]
                            }
                            Passes::Paged | Passes::PagedLocal => {
                                &[Pass::FwdPaged, Pass::FwdCombine]
                            }
                            Passes::Varlen | Passes::VarlenLocal => &[Pass::FwdVarlen],
                            Passes::VarlenBwd | Passes::VarlenBwdLocal => &[
                                Pass::BwdPreVarlen,
                                Pass::BwdVarlen,
                                Pass::BwdDqVarlen,
                                Pass::BwdPostVarlen,
                            ],
                        };
                        for &pass in passes {
                            let spec = KernelSpec {
                                pass,
                                head_dim,
                                dtype,
                                mask: match p {
                                    Passes::FwdLocal
                                    | Passes::VarlenLocal
                                    | Passes::KvCacheLocal
                                    | Passes::PagedLocal
                                    | Passes::BwdLocal
                                    | Passes::VarlenBwdLocal
                                        if pass.has_mask_for(Mask::Local) =>
                                    {
                                        Mask::Local
                                    }
                                    _ => Mask::causal(causal && pass.has_mask()),
                                },
                                scores: Scores::Plain,
                                tiling: Tiling::Standard,
                                arch,
                            };
                            for &scores in &a.scores {
                                // (softcap: every pass that computes scores, ALiBi: those
                                // with ALiBi kernels; bwdpre, bwdpost and fwdcombine stay
                                // plain, whatever the scores)
                                let scores = match pass.has_mask() {
                                    true => scores,
                                    false => Scores::Plain,
                                };
                                let spec = KernelSpec { scores, ..spec };
                                if spec.is_supported() {
                                    specs.extend(spec.tilings());
                                }
                            }
                            assert!(spec.is_supported(), "checked spec {spec} unsupported");
                        }
                    }
                }
            }
        }
    }
    specs
}

/// Parse `tokens` as a `flash_kernel!` input.
pub fn parse(tokens: TokenStream) -> Result<Input> {
    syn::parse2(tokens)
}
