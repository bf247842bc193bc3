//! `flash_kernel!` key values: an atom as written, and each key's check of its atoms,
//! with its compile error.

use flash_codegen::spec::HEAD_DIMS;
use flash_codegen::{Arch, DType, KernelSpec};
use proc_macro2::Span;
use syn::{Error, Ident, Lit, Result};

/// What `passes = ...` selects: the forward, or every backward kernel the runtime launches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passes {
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
pub(crate) enum Atom {
    Lit(Lit),
    Word(Ident),
}

impl Atom {
    pub(crate) fn span(&self) -> Span {
        match self {
            Atom::Lit(l) => l.span(),
            Atom::Word(w) => w.span(),
        }
    }
}

/// Check each value of a key, refusing repeats.
pub(crate) fn each<T: PartialEq>(atoms: &[Atom], check: fn(&Atom) -> Result<T>) -> Result<Vec<T>> {
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

pub(crate) fn head_dim(a: &Atom) -> Result<u32> {
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

pub(crate) fn word<'a>(a: &'a Atom, what: &str, expected: &str) -> Result<&'a Ident> {
    match a {
        Atom::Word(w) => Ok(w),
        Atom::Lit(l) => Err(Error::new(l.span(), format!("expected {what}: {expected}"))),
    }
}

pub(crate) fn dtype(a: &Atom) -> Result<DType> {
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

pub(crate) fn causal(a: &Atom) -> Result<bool> {
    match a {
        Atom::Lit(Lit::Bool(b)) => Ok(b.value),
        _ => Err(Error::new(
            a.span(),
            "expected `true` or `false` (or `[false, true]` for both variants)",
        )),
    }
}

pub(crate) fn passes(a: &Atom) -> Result<Passes> {
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

/// An `arch` value: the sm_80 kernels (`KernelSpec`s of `arch`), or the sm_90a forwards
/// (`fwd::Variant`s, which have no `KernelSpec`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Sm80(Arch),
    Sm90a,
}

impl Target {
    /// The sm_80 arch, if this is one.
    pub(crate) fn sm80(self) -> Option<Arch> {
        match self {
            Target::Sm80(a) => Some(a),
            Target::Sm90a => None,
        }
    }
}

pub(crate) fn arch(a: &Atom) -> Result<Target> {
    let expected = "`sm80` (mma.sync kernels for every GPU from sm_80 on, H100/H200 included), \
                    `sm90a` (the Hopper forward: wgmma and TMA, compute capability 9.0; head \
                    dims 64 and 128, `passes = fwd`) or a list of both, `[sm80, sm90a]`";
    let w = word(a, "an arch", expected)?;
    if w == "sm90a" {
        return Ok(Target::Sm90a);
    }
    Arch::ALL
        .into_iter()
        .find(|x| w == x.name())
        .map(Target::Sm80)
        .ok_or_else(|| Error::new(w.span(), format!("unknown arch `{w}`: expected {expected}")))
}
