//! `arch = sm90a`: the sm_90a (Hopper) forwards an invocation embeds, checked with a span
//! on every error.
//!
//! The key is literal: `sm90a` embeds the sm_90a forwards, `sm80` the sm_80 kernels, and
//! `[sm80, sm90a]` both. So with `sm90a` alone every value must have an sm_90a kernel
//! (head dims 64 and 128, `passes = fwd` or `fwd_local`): anything else would embed
//! nothing for it, and is an error on its token. With `sm80` beside it, `sm90a` adds the
//! forwards of the combinations that have one, and must add at least one.

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::{DType, Mask, Scores};
use syn::{Error, Result};

use crate::parse::{Args, Entry};
use crate::values::{Atom, Passes, Target};

/// What `sm90a` embeds, for the errors.
const SUPPORTS: &str = "`arch = sm90a` embeds the sm_90a forward (wgmma, TMA; compute \
                        capability 9.0), which takes `passes = fwd` (causal or not) and \
                        `fwd_local` (the sliding window), head dims 64 and 128, f16 and \
                        bf16, plain, softcapped (`softcap = true`) or ALiBi (`alibi = true`, \
                        no window) scores";

/// The shipping sm_90a forward of every (dtype, head dim, causal, scores) the invocation
/// asks for with `sm90a` in `arch` (none without it), and with `fwd_local` in `passes` the
/// sliding window's (plain or softcapped), in `manifest::sm90a::shipping` order.
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
    } else {
        None
    };
    let nothing = |why: &str| {
        let msg = format!(
            "`sm90a` embeds nothing here ({why}): {SUPPORTS}; drop `sm90a` or ask for one of \
             its forwards"
        );
        Error::new(atoms("arch")[at].span(), msg)
    };
    if let Some(why) = none {
        return Err(nothing(why));
    }
    // the masks asked for: `fwd` with each `causal` value, `fwd_local` the window
    let fwd = args.passes.contains(&Passes::Fwd);
    let wants = |mask: Mask| match mask {
        Mask::None => fwd && args.causal.contains(&false),
        Mask::Causal => fwd && args.causal.contains(&true),
        Mask::Local => args.passes.contains(&Passes::FwdLocal),
    };
    let plain = Mask::ALL.map(|m| (Scores::Plain, m));
    let mut out = Vec::new();
    for dtype in DType::ALL.into_iter().filter(|d| args.dtypes.contains(d)) {
        for &head_dim in fwd::HEAD_DIMS.iter().filter(|d| head_dims.contains(d)) {
            for (scores, mask) in plain.into_iter().chain(fwd::Variant::SCORED) {
                if args.scores.contains(&scores) && wants(mask) {
                    out.push(fwd::Variant::shipping_scored(dtype, head_dim, mask, scores));
                }
            }
        }
    }
    if out.is_empty() {
        return Err(nothing("ALiBi has no sliding-window kernel"));
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

/// `arch = sm90a` alone: every head dim and pass must have an sm_90a kernel.
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
    Ok(())
}
