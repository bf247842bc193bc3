flash_ptx::flash_kernel! {
    head_dim = 64, dtype = bf16, causal = true, passes = fwd
}

fn main() {}
