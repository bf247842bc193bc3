// With sm80 beside it, `sm90a` must still add a forward.
flash_ptx::flash_kernel! {
    mod attn { head_dim = 96, dtype = f16, causal = false, passes = fwd, arch = [sm80, sm90a] }
}

fn main() {}
