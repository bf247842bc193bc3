//! flash-macros: `flash_kernel!`, FlashAttention-2 kernel variants generated at compile
//! time. Use it through the `flash-ptx` crate (`flash_ptx::flash_kernel!`), whose paths its
//! expansion names.
//!
//! A thin proc-macro: `parse` checks the input (every error points at the
//! offending token), `flash_codegen::generate` writes each variant's PTX, and
//! `expand` quotes it into a module of string literals and typed handles.

#![forbid(unsafe_code)]

mod expand;
mod parse;
mod sm90a;
mod values;

#[cfg(test)]
mod tests;

/// Generates FlashAttention-2 kernel variants at compile time and embeds their PTX in a
/// module, so the runtime loads and launches them without generating code at run time.
///
/// ```
/// flash_ptx::flash_kernel! {
///     /// The attention kernels of my model.
///     pub mod attn {
///         head_dim = [64, 128],
///         dtype = bf16,
///         causal = [false, true],
///         passes = [fwd, bwd],
///     }
/// }
///
/// // 2 head dims x 2 causal: 4 forward kernels; per head dim, bwd and bwddq (x 2 causal)
/// // and bwdpre, bwdpost, bwdkvsum (no causal variant): 14 backward kernels; d128's bwd
/// // also in its long-sequence tiling and its compact one for 99 KiB GPUs, d64's in its
/// // compact one for the A100's shared memory per SM (x 2 causal each).
/// assert_eq!(attn::KERNELS.len(), 24);
/// assert_eq!(
///     attn::FA2_BWD_D128_BF16_CAUSAL_LONG_SM80.spec().tiling,
///     flash_ptx::codegen::Tiling::Long
/// );
/// let k = attn::FA2_FWD_D128_BF16_CAUSAL_SM80;
/// assert_eq!(k.spec().name(), "fa2_fwd_d128_bf16_causal_sm80");
/// assert_eq!(k.ptx(), flash_ptx::codegen::generate(&k.spec()));
///
/// # fn run() -> flash_ptx::runtime::Result<()> {
/// // On a GPU: a runtime that runs only these kernels (never generates code).
/// let rt = attn::on_device(0)?;
/// # let _ = rt; Ok(()) }
/// ```
///
/// # Syntax
///
/// `flash_kernel! { VIS mod NAME { key = value, ... } }`, with outer attributes (docs)
/// allowed before the module. A value is one item or a list `[a, b, ...]`; lists
/// instantiate every combination.
///
/// | key | values | |
/// |-----|--------|-|
/// | `head_dim` | `32`, `64`, `96`, `128`, `160`, `192`, `224`, `256` | required |
/// | `dtype` | `f16`, `bf16` | required |
/// | `causal` | `false`, `true` | required |
/// | `passes` | `fwd`, `bwd`, `kvcache`, `paged`, `varlen`, `varlen_bwd`, `fwd_local`, `varlen_local`, `kvcache_local`, `paged_local`, `bwd_local`, `varlen_bwd_local` | required |
/// | `arch` | `sm80`, `sm90a` | optional, default `sm80` |
///
/// `arch` is literal: `sm80` embeds the sm_80 kernels, `sm90a` the sm_90a (Hopper: wgmma,
/// TMA; compute capability 9.0) forward, `[sm80, sm90a]` both. The sm_90a path is the
/// dense forward only: `sm90a` embeds `fwd::Variant::shipping` of each `dtype`, `causal`
/// and head dim 64 or 128 with `fwd` in `passes`, the sliding window's with `fwd_local`,
/// and with `softcap = true` / `alibi = true` their softcap and ALiBi twins (ALiBi: no
/// window). With `sm90a` alone every head dim and pass must have such a kernel
/// (anything else is a compile error on its token: add `sm80`); with `sm80` beside it,
/// `sm90a` adds the forwards of the combinations that have one, and must add at least
/// one. An embedded-only runtime runs the sm_90a forward on compute capability 9.0 for
/// the calls `ForwardArch::Auto` gives it, the sm_80 kernels for the rest (with `sm90a`
/// alone: `FlashError::KernelNotEmbedded`, naming the keys to add).
///
/// Only the kernel head dims are instantiable: a problem of head dim `d` (a multiple of 8
/// up to 256) runs on the kernel `KernelSpec::kernel_head_dim(d)`, the next one up (head
/// dim 80 on the `96` kernel). `bwd` brings every backward kernel the runtime launches:
/// `bwdpre` and `bwdpost` (no causal variant), `bwd` and `bwddq` (deterministic mode), and
/// for head dim 128 the `bwd` kernel's long-sequence tiling (`..._LONG_SM80`, run in
/// atomic mode from 8192 query rows on; `KernelSpec::long_from`). `fwd` at head dim 256
/// also brings its compact tiling (`..._COMPACT_SM80`, run on GPUs with less than 104.5
/// KiB of shared memory per block, e.g. RTX 30/40; `KernelSpec::for_smem`).
/// `kvcache` brings the KV-cache forward (`FlashAttention::forward_kvcache`): the split-KV
/// kernel `fwdsplit` (causal or not, as `causal` says) and its combine step `fwdcombine`
/// (no causal variant; with its `_long` kernel, 8 warps a row, run from 33 splits, and
/// its `_prefill` one, a row per warp, up to 8). `paged` brings the paged KV-cache forward
/// (`FlashAttention::forward_kvcache_paged`): `fwdpaged` in the same tilings as `fwdsplit`
/// and the same combine kernels. `varlen` brings the packed-sequence forward
/// (`FlashAttention::forward_varlen`: `fwdvarlen`), `varlen_bwd` its backward
/// (`bwdprevarlen`, `bwdvarlen`, `bwddqvarlen`, `bwdpostvarlen`), with, at head dims 64, 96
/// and 128, the `bwdvarlen` kernel's wide tiling (`..._WIDE_SM80`, run on GPUs of compute
/// capability 9.0 and newer; `KernelSpec::for_compute_capability`). `fwd_local` brings
/// the sliding-window forward (`..._LOCAL_SM80`: `AttnParams::with_window`; the window is
/// a runtime parameter, so `causal` leaves it as it is), `varlen_local`, `kvcache_local`
/// and `paged_local` the packed-sequence, KV-cache and paged ones (each with its combine
/// step, which has no mask); `bwd_local` and `varlen_bwd_local` the backwards under a
/// window (`bwd` and `bwddq` local, with the plain `bwdpre` and `bwdpost`). `softcap =
/// true` (or `[false, true]`) adds the softcap twin of every kernel that computes scores
/// (`AttnParams::with_softcap`: every forward, bwd and bwddq; bwdpre, bwdpost and the
/// combine step are shared). `alibi = true` (or `[false, true]`) adds the ALiBi twin of
/// the kernels that have one (`AttnParams::with_alibi`: fwd, bwd and bwddq under no mask
/// and the causal one); `softcap = true` with `alibi = true` is an error (no kernel
/// computes both).
///
/// Compile errors point at the offending token: an unknown or duplicate key, a missing
/// required key, an empty list or a repeated value, an unsupported head dim, an unknown
/// dtype, pass or arch, an `sm90a` that cannot embed what the other keys ask for.
///
/// # Expansion
///
/// `VIS mod NAME` holding:
/// - one `pub const FA2_..._SM80: EmbeddedKernel` per variant (the spec and its PTX, named
///   after the kernel: `FA2_FWD_D128_BF16_CAUSAL_SM80`);
/// - `pub static KERNELS: &[EmbeddedKernel]`, all of them in `KernelSpec` order;
/// - with `sm90a`, one `pub const FA3_FWD_..._SM90A: EmbeddedSm90aKernel` per sm_90a
///   forward (the variant and its PTX, named after its entry:
///   `FA3_FWD_D128_BF16_CAUSAL_OVL_PP_M128_DYN_TST_SM90A`);
/// - `pub static SM90A_KERNELS: &[EmbeddedSm90aKernel]`, those (empty without `sm90a`);
/// - `pub fn runtime(ctx) -> Result<FlashAttention>` and `pub fn on_device(ordinal)`:
///   a runtime that runs only `KERNELS` and `SM90A_KERNELS` and fails with
///   `FlashError::KernelNotEmbedded` (saying what to add here) for any other variant;
/// - `pub fn register(rt: &FlashAttention)`: use this PTX in a runtime that still
///   generates the variants it lacks.
///
/// # Cost
///
/// Each variant is generated while the crate compiles, in about 5 ms even in the
/// unoptimised build of the generator that proc-macros get by default, and adds its PTX
/// (20 to 160 KB) to the binary: on 2 cores, rebuilding a crate that embeds 16 variants
/// takes 0.13 to 0.15 s longer than with 1 (dev and release); the full set (128
/// variants when measured, 136 now) took 1.5 s and 13 MB.
#[proc_macro]
pub fn flash_kernel(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
