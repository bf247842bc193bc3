flash_ptx::flash_kernel! {
    mod attn { head_dim = 64, dtype = bf16, causal = true, passes = fwd, arch = sm100 }
}

fn main() {}
