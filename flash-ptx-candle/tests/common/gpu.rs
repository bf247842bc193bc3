//! Helpers of the GPU tests: one shared device, random tensors, rel L2 of two tensors.

use candle_core::{DType, Device, Tensor, Var};

/// One device for every test: each `Device::new_cuda` is a new candle device (its own
/// id and stream), and candle keeps tensors of different devices apart.
pub fn dev() -> Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new_cuda(0).expect("a CUDA device"))
        .clone()
}

pub fn randn(dev: &Device, shape: (usize, usize, usize, usize), dt: DType) -> Tensor {
    Tensor::randn(0f32, 1., shape, dev)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
}

pub fn rel_l2(got: &Tensor, want: &Tensor) -> f64 {
    let f64s = |t: &Tensor| t.to_dtype(DType::F64).unwrap().flatten_all().unwrap();
    let sum_sq = |t: &Tensor| {
        t.sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let (g, w) = (f64s(got), f64s(want));
    let (num, den) = (sum_sq(&(&g - &w).unwrap()), sum_sq(&w));
    match den {
        0.0 => num.sqrt(),
        _ => (num / den).sqrt(),
    }
}

/// Fresh variables of `ts` converted to `dt` (their gradients are tracked).
pub fn vars(ts: [&Tensor; 3], dt: DType) -> Vec<Var> {
    ts.iter()
        .map(|t| Var::from_tensor(&t.to_dtype(dt).unwrap()).unwrap())
        .collect()
}
