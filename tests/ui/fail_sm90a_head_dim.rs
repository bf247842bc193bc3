// `arch = sm90a` alone embeds only the sm_90a forward: head dims 64 and 128.
flash_ptx::flash_kernel! {
    mod attn { head_dim = [64, 96], dtype = bf16, causal = true, passes = fwd, arch = sm90a }
}

fn main() {}
