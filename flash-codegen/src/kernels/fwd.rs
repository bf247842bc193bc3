//! Kernel layer: FlashAttention-2 forward (in progress).

use crate::abi;
use crate::ptx::{Builder, Entry, LaunchBounds};
use crate::spec::KernelSpec;

pub fn build(spec: &KernelSpec) -> Entry {
    let b = Builder::new();
    let t = spec.tiles();
    b.finish(
        spec.name(),
        abi::ir_params(spec.pass),
        LaunchBounds {
            max_threads: Some(t.threads()),
            min_ctas_per_sm: None,
        },
    )
}
