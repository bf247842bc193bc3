//! `arch = sm90a` and `arch = [sm80, sm90a]` compile warning-free, with typed handles.
#![deny(warnings, missing_docs)]

flash_ptx::flash_kernel! {
    /// The sm_90a forwards only.
    pub mod hopper { head_dim = [64, 128], dtype = bf16, causal = [false, true], passes = fwd, arch = sm90a }
}

flash_ptx::flash_kernel! {
    /// Both: the sm_90a forward where it applies, sm_80 for the rest.
    pub mod both { head_dim = 128, dtype = f16, causal = true, passes = [fwd, bwd], arch = [sm80, sm90a] }
}

fn main() {
    assert!(hopper::KERNELS.is_empty());
    assert_eq!(hopper::SM90A_KERNELS.len(), 4);
    let k: flash_ptx::runtime::EmbeddedSm90aKernel = both::FA3_FWD_D128_F16_CAUSAL_OVL_PP_M128_DYN_TST_SM90A;
    assert_eq!(both::SM90A_KERNELS, [k]);
    assert!(k.ptx().contains(".entry fa3_fwd_d128_f16_causal_ovl_pp_m128_dyn_tst_sm90a"));
    assert!(!both::KERNELS.is_empty());
    let _: fn(&flash_ptx::runtime::FlashAttention) = both::register;
}
