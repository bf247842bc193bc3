//! `arch = sm90a`: the sm_90a (Hopper) forwards an invocation embeds, checked with a span
//! on every error.
//!
//! The key is literal: `sm90a` embeds the sm_90a forwards, `sm80` the sm_80 kernels, and
//! `[sm80, sm90a]` both. So with `sm90a` alone every value must have an sm_90a kernel
//! (head dims 64 and 128, `passes = fwd`, no softcap or ALiBi): anything else would embed
//! nothing for it, and is an error on its token. With `sm80` beside it, `sm90a` adds the
//! forwards of the combinations that have one, and must add at least one.

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::{DType, Mask, Scores};
use syn::{Error, Result};

use crate::parse::{Args, Entry};
use crate::values::{Atom, Passes, Target, causal};

/// What `sm90a` embeds, for the errors.
const SUPPORTS: &str = "`arch = sm90a` embeds the sm_90a forward (wgmma, TMA; compute \
                        capability 9.0), which takes `passes = fwd` (causal or not) and \
                        `fwd_local` (the sliding window), head dims 64 and 128, f16 and \
                        bf16, no softcap or ALiBi";

/// The shipping sm_90a forward of every (dtype, head dim, causal) the invocation asks for
/// with `sm90a` in `arch` (none without it), and with `fwd_local` in `passes` the sliding
/// window's, in `manifest::sm90a::shipping` order.
pub(crate) fn variants(entries: &[Entry], args: &Args) -> Result<Vec<fwd::Variant>> {
    let atoms = |key: &str| atoms(entries, key);
    let Some(at) = args.arch.iter().position(|t| *t == Target::Sm90a) else {
        return Ok(Vec::new());
    };
    let only = !args.arch.iter().any(|t| t.sm80().is_some());
    if only {
        only_sm90a(entries, args)?;
    }
    let head_dims: Vec<u32> = (args.head_dims.iter().copied())
        .filter(|d| fwd::HEAD_DIMS.contains(d))
        .collect();
    let none = if head_dims.is_empty() {
        Some("no head dim 64 or 128")
    } else if !args.passes.iter().any(|p| sm90a_pass(*p)) {
        Some("no `fwd` or `fwd_local` in `passes`")
    } else if !args.scores.contains(&Scores::Plain) {
        Some("only softcap or ALiBi kernels")
    } else {
        None
    };
    if let Some(why) = none {
        let msg = format!(
            "`sm90a` embeds nothing here ({why}): {SUPPORTS}; drop `sm90a` or ask for one of \
             its forwards"
        );
        return Err(Error::new(atoms("arch")[at].span(), msg));
    }
    let mut out = Vec::new();
    for dtype in DType::ALL.into_iter().filter(|d| args.dtypes.contains(d)) {
        for &head_dim in fwd::HEAD_DIMS.iter().filter(|d| head_dims.contains(d)) {
            if args.passes.contains(&Passes::Fwd) {
                for causal in [false, true]
                    .into_iter()
                    .filter(|c| args.causal.contains(c))
                {
                    out.push(fwd::Variant::shipping(dtype, head_dim, causal));
                }
            }
            if args.passes.contains(&Passes::FwdLocal) {
                out.push(fwd::Variant::shipping_for(dtype, head_dim, Mask::Local));
            }
        }
    }
    Ok(out)
}

/// Whether pass `p` has an sm_90a kernel (the dense forward, plain or windowed).
fn sm90a_pass(p: Passes) -> bool {
    matches!(p, Passes::Fwd | Passes::FwdLocal)
}

/// The values of `key` as written (none if it is not given).
fn atoms<'a>(entries: &'a [Entry], key: &str) -> &'a [Atom] {
    entries
        .iter()
        .find(|e| e.key == key)
        .map_or(&[], |e| &e.values)
}

/// `arch = sm90a` alone: every head dim, pass and score flag must have an sm_90a kernel.
fn only_sm90a(entries: &[Entry], args: &Args) -> Result<()> {
    let atoms = |key: &str| atoms(entries, key);
    let add = "add `sm80` (`arch = [sm80, sm90a]`) to embed the sm_80 kernels too";
    for (a, d) in atoms("head_dim").iter().zip(&args.head_dims) {
        if !fwd::HEAD_DIMS.contains(d) {
            let msg = format!("head_dim {d} has no sm_90a kernel: {SUPPORTS}; {add}");
            return Err(Error::new(a.span(), msg));
        }
    }
    for (a, p) in atoms("passes").iter().zip(&args.passes) {
        if !sm90a_pass(*p) {
            let name = match a {
                Atom::Word(w) => w.to_string(),
                Atom::Lit(_) => "this".to_string(),
            };
            let msg = format!("pass `{name}` has no sm_90a kernel: {SUPPORTS}; {add}");
            return Err(Error::new(a.span(), msg));
        }
    }
    for key in ["softcap", "alibi"] {
        for a in atoms(key) {
            if causal(a)? {
                let msg = format!("`{key} = true` has no sm_90a kernel: {SUPPORTS}; {add}");
                return Err(Error::new(a.span(), msg));
            }
        }
    }
    Ok(())
}
