//! [`FlashAttention`]'s planning limits: the shared memory and compute capability calls
//! are planned for, lowered to test a smaller GPU's kernels on a larger one.

use crate::FlashAttention;

impl FlashAttention {
    /// Plans every later call as if the GPU allowed at most `bytes` of dynamic shared
    /// memory per block (never more than it does): the kernels a GPU with less shared
    /// memory runs (e.g. RTX 30/40's 99 KiB: the d256 forward's compact tiling) can then
    /// be tested on a larger one.
    pub fn limit_smem(&mut self, bytes: u64) {
        self.smem_optin = self.smem_optin.min(bytes);
    }

    /// Runs every kernel loaded after this call as if each SM had at most `bytes` of
    /// shared memory (never more than it has), so that a larger GPU fits as many CTAs per
    /// SM as a smaller one (an A100's 164 KiB on an H100/H200, whose 164 KB configuration
    /// matches it): each kernel's preferred carveout
    /// (`CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`) is set to the largest whole
    /// percentage of the SM's shared memory at or below `bytes`. The carveout is a hint:
    /// the driver takes a configuration that fits it (rounding up) and, for a kernel that
    /// needs more, a larger one. For tests and benchmarks; kernels already loaded keep
    /// theirs.
    pub fn limit_smem_per_sm(&mut self, bytes: u64) {
        self.smem_per_sm.0 = self.smem_per_sm.0.min(bytes);
    }

    /// The shared memory per SM this runtime runs kernels with (the GPU's, or less after
    /// [`FlashAttention::limit_smem_per_sm`]).
    pub fn smem_per_sm(&self) -> u64 {
        self.smem_per_sm.0
    }

    /// Plans every later call as if the GPU had compute capability `(major, minor)` at
    /// most (never more than it has): the kernels older GPUs run (the sm_80 forward where
    /// 9.0 runs the sm_90a one, the varlen backward's standard rows where 9.0 and newer
    /// run the wide ones) can then be tested on a newer one.
    pub fn limit_compute_capability(&mut self, major: u32, minor: u32) {
        self.cc = self.cc.min((major, minor));
    }

    /// The compute capability this runtime plans for (the GPU's, or less after
    /// [`FlashAttention::limit_compute_capability`]).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.cc
    }

    /// The dynamic shared memory per block this runtime plans for (the GPU's opt-in
    /// limit, or less after [`FlashAttention::limit_smem`]).
    pub fn smem_limit(&self) -> u64 {
        self.smem_optin
    }
}
