//! Helpers of the CPU tests: seeded inputs, host copies, the float64 reference's rule.
#![allow(dead_code)]

#[cfg(feature = "gpu")]
pub mod gpu;

use candle_core::{Device, Tensor};
use flash_ptx_candle::FlashParams;
use flash_runtime::reference::Modifiers;

pub fn randn(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
    let dev = Device::Cpu;
    let n = shape.0 * shape.1 * shape.2 * shape.3;
    let mut rng = flash_runtime::rng::Rng::new(seed);
    Tensor::from_vec(rng.normal_vec(n), shape, &dev).unwrap()
}

pub fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// The f64 reference's rule for `p` (slopes given separately as host values).
pub fn modifiers(p: &FlashParams, slopes: Option<&[f32]>) -> Modifiers {
    let (left, right) = p.window().unwrap();
    let mut m = Modifiers::causal(false);
    if (left, right) != (-1, -1) {
        m = m.with_window(i64::from(left), i64::from(right));
    }
    if let Some(cap) = p.softcap {
        m = m.with_softcap(f64::from(cap));
    }
    if let Some(s) = slopes {
        m = m.with_alibi(s.iter().map(|&x| f64::from(x)).collect());
    }
    m
}
