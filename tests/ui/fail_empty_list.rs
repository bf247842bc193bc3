flash_ptx::flash_kernel! {
    mod attn { head_dim = 64, dtype = [], causal = true, passes = fwd }
}

fn main() {}
