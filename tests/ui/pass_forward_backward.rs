//! A valid invocation compiles warning-free, private or public, used or not.
#![deny(warnings, missing_docs)]

flash_ptx::flash_kernel! {
    /// The kernels of one model.
    pub mod attn {
        head_dim = [64, 128],
        dtype = bf16,
        causal = [false, true],
        passes = [fwd, bwd],
    }
}

flash_ptx::flash_kernel! {
    mod unused { head_dim = 32, dtype = [f16, bf16], causal = false, passes = fwd, arch = sm80 }
}

fn main() {
    // (the d128 and d64 backward's 2 compact kernels each and the 2 bwdkvsum among them)
    assert_eq!(attn::KERNELS.len(), 24);
    let _: fn(&flash_ptx::runtime::FlashAttention) = attn::register;
    let _: fn(usize) -> flash_ptx::runtime::Result<flash_ptx::runtime::FlashAttention> =
        attn::on_device;
    let k: flash_ptx::runtime::EmbeddedKernel = attn::FA2_BWDPOST_D64_BF16_SM80;
    assert!(k.ptx().contains(".entry fa2_bwdpost_d64_bf16_sm80"));
}
