// `arch = sm90a` alone embeds only the sm_90a forward: `passes = fwd` or `fwd_local`.
flash_ptx::flash_kernel! {
    mod attn { head_dim = 128, dtype = f16, causal = false, passes = [fwd, bwd], arch = sm90a }
}

fn main() {}
