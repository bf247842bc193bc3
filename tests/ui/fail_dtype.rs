flash_ptx::flash_kernel! {
    mod attn { head_dim = 64, dtype = fp8, causal = true, passes = fwd }
}

fn main() {}
