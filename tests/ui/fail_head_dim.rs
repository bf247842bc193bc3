flash_ptx::flash_kernel! {
    mod attn { head_dim = [64, 80], dtype = bf16, causal = true, passes = fwd }
}

fn main() {}
