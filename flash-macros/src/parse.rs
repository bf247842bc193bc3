//! Input layer: `flash_kernel!`'s `mod NAME { key = value, ... }`, parsed and checked
//! with a span on every error.

use std::collections::BTreeSet;

use flash_codegen::spec::HEAD_DIMS;
use flash_codegen::{Arch, DType, KernelSpec, Mask, Pass, Scores, Tiling};
use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Ident, Lit, Result, Token, Visibility, braced, bracketed};

/// The keys, in the order the docs give them. `arch` is the only optional one.
const KEYS: [&str; 6] = ["head_dim", "dtype", "causal", "passes", "arch", "softcap"];

/// A parsed invocation: the module to emit and the kernel variants it embeds.
pub struct Input {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub ident: Ident,
    pub specs: BTreeSet<KernelSpec>,
}

/// What `passes = ...` selects: the forward, or every backward kernel the runtime launches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Passes {
    Fwd,
    Bwd,
    KvCache,
    Paged,
    Varlen,
    VarlenBwd,
    FwdLocal,
    VarlenLocal,
    KvCacheLocal,
    PagedLocal,
    BwdLocal,
    VarlenBwdLocal,
}

/// One value as written: a literal or a bare word, e.g. `128`, `true`, `bf16`.
enum Atom {
    Lit(Lit),
    Word(Ident),
}

impl Atom {
    fn span(&self) -> Span {
        match self {
            Atom::Lit(l) => l.span(),
            Atom::Word(w) => w.span(),
        }
    }
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
struct Entry {
    key: Ident,
    list: Option<Span>,
    values: Vec<Atom>,
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
        let specs = specs(&ident, entries.into_iter().collect())?;
        Ok(Input {
            attrs,
            vis,
            ident,
            specs,
        })
    }
}

/// The checked values of every key.
struct Args {
    head_dims: Vec<u32>,
    dtypes: Vec<DType>,
    causal: Vec<bool>,
    passes: Vec<Passes>,
    arch: Vec<Arch>,
    /// Plain scores, and softcap where `softcap = true` asks for it.
    scores: Vec<Scores>,
}

/// Check every entry and make the product of the values.
fn specs(module: &Ident, entries: Vec<Entry>) -> Result<BTreeSet<KernelSpec>> {
    let mut seen: Vec<&Ident> = Vec::new();
    for e in &entries {
        let key = e.key.to_string();
        if !KEYS.contains(&key.as_str()) {
            let msg = format!(
                "unknown key `{key}`: flash_kernel! takes head_dim, dtype, causal, passes \
                 and (optional) arch and softcap (true or false)"
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
            None => vec![Arch::Sm80],
        },
        scores: match entries.iter().find(|e| e.key == "softcap") {
            Some(e) => each(&e.values, causal)?
                .into_iter()
                .map(|on| if on { Scores::Softcap } else { Scores::Plain })
                .collect(),
            None => vec![Scores::Plain],
        },
    };
    Ok(product(&args))
}

/// Check each value of a key, refusing repeats.
fn each<T: PartialEq>(atoms: &[Atom], check: fn(&Atom) -> Result<T>) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(atoms.len());
    for a in atoms {
        let v = check(a)?;
        if out.contains(&v) {
            return Err(Error::new(a.span(), "this value is already in the list"));
        }
        out.push(v);
    }
    Ok(out)
}

fn head_dim(a: &Atom) -> Result<u32> {
    let expected = "expected a head dim, e.g. `head_dim = 128` or `head_dim = [64, 128]`";
    let Atom::Lit(Lit::Int(l)) = a else {
        return Err(Error::new(a.span(), expected));
    };
    let kernels = "flash_kernel! instantiates the kernel head dims 32, 64, 96, 128, 160, 192, \
                   224 and 256";
    let d = l
        .base10_parse::<u32>()
        .map_err(|_| Error::new(l.span(), format!("unsupported head_dim `{l}`: {kernels}")))?;
    if HEAD_DIMS.contains(&d) {
        return Ok(d);
    }
    let why = match KernelSpec::kernel_head_dim(d) {
        Some(k) => {
            format!("{kernels}; problems of head dim {d} run on the `head_dim = {k}` kernel")
        }
        None => format!("{kernels}; the runtime takes head dims that are multiples of 8 up to 256"),
    };
    Err(Error::new(
        l.span(),
        format!("unsupported head_dim {d}: {why}"),
    ))
}

fn word<'a>(a: &'a Atom, what: &str, expected: &str) -> Result<&'a Ident> {
    match a {
        Atom::Word(w) => Ok(w),
        Atom::Lit(l) => Err(Error::new(l.span(), format!("expected {what}: {expected}"))),
    }
}

fn dtype(a: &Atom) -> Result<DType> {
    let expected = "`f16` or `bf16`";
    let w = word(a, "a dtype", expected)?;
    DType::ALL
        .into_iter()
        .find(|d| w == d.name())
        .ok_or_else(|| {
            Error::new(
                w.span(),
                format!("unknown dtype `{w}`: expected {expected}"),
            )
        })
}

fn causal(a: &Atom) -> Result<bool> {
    match a {
        Atom::Lit(Lit::Bool(b)) => Ok(b.value),
        _ => Err(Error::new(
            a.span(),
            "expected `true` or `false` (or `[false, true]` for both variants)",
        )),
    }
}

fn passes(a: &Atom) -> Result<Passes> {
    let expected = "expected `fwd` (the forward), `bwd` (every backward kernel: bwdpre, bwd, \
                    bwddq and bwdpost), `kvcache` (the KV-cache forward: fwdsplit and \
                    fwdcombine), `paged` (the paged KV-cache forward: fwdpaged and \
                    fwdcombine), `varlen` (the packed-sequence forward: fwdvarlen) or \
                    `varlen_bwd` (its backward: bwdprevarlen, bwdvarlen with its wide tiling \
                    at d64-d128, bwddqvarlen and bwdpostvarlen), `fwd_local` (the \
                    sliding-window forward: fwd, mask local), `varlen_local`, \
                    `kvcache_local` or `paged_local` (the sliding-window packed-sequence, \
                    KV-cache and paged forwards: mask local), `bwd_local` or \
                    `varlen_bwd_local` (the sliding-window backwards: bwd and bwddq with \
                    mask local, bwdpre and bwdpost)";
    let w = word(a, "a pass", expected)?;
    match w.to_string().as_str() {
        "fwd" => Ok(Passes::Fwd),
        "bwd" => Ok(Passes::Bwd),
        "kvcache" => Ok(Passes::KvCache),
        "paged" => Ok(Passes::Paged),
        "varlen" => Ok(Passes::Varlen),
        "varlen_bwd" => Ok(Passes::VarlenBwd),
        "fwd_local" => Ok(Passes::FwdLocal),
        "varlen_local" => Ok(Passes::VarlenLocal),
        "kvcache_local" => Ok(Passes::KvCacheLocal),
        "paged_local" => Ok(Passes::PagedLocal),
        "bwd_local" => Ok(Passes::BwdLocal),
        "varlen_bwd_local" => Ok(Passes::VarlenBwdLocal),
        other => Err(Error::new(
            w.span(),
            format!("unknown pass `{other}`: {expected}"),
        )),
    }
}

fn arch(a: &Atom) -> Result<Arch> {
    let expected = "`sm80` (mma.sync kernels for every GPU from sm_80 on, H100/H200 included)";
    let w = word(a, "an arch", expected)?;
    Arch::ALL
        .into_iter()
        .find(|x| w == x.name())
        .ok_or_else(|| Error::new(w.span(), format!("unknown arch `{w}`: expected {expected}")))
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
    for &arch in &a.arch {
        for &head_dim in &a.head_dims {
            for &dtype in &a.dtypes {
                for &causal in &a.causal {
                    for &p in &a.passes {
                        let passes: &[Pass] = match p {
                            Passes::Fwd | Passes::FwdLocal => &[Pass::Fwd],
                            Passes::Bwd | Passes::BwdLocal => {
                                &[Pass::BwdPre, Pass::Bwd, Pass::BwdDq, Pass::BwdPost]
                            }
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
                                // (softcap: every pass that computes scores; bwdpre, bwdpost
                                // and fwdcombine stay plain)
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
