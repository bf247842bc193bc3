//! Helpers shared by the GPU tests (`gpu_fwd`, `gpu_bwd`, `gpu_kvcache`): where a logical
//! `[b, s, h, d]` tensor sits in its (possibly padded) device buffer, NaN-poisoned uploads,
//! bf16/f16-rounded random inputs, the attention parameters of a case, the
//! `[b, s, h, d]` <-> `[b, h, s, d]` (PyTorch) host transposes, and a forward case's o
//! checks (fully masked rows, rel-L2 tolerance) and report line; the varlen tests'
//! offsets and runtimes.
#![allow(dead_code)] // each test binary uses its own subset

pub mod sm90;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use flash_codegen::DType;
use flash_runtime::reference::rel_l2;
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, Element, Mask, Tensor4, Tensor4Mut};

/// Where a logical `[b, s, h, d]` tensor sits in its buffer.
#[derive(Clone, Copy)]
pub struct Placed {
    pub shape: [usize; 4],
    pub strides: [usize; 4],
    pub offset: usize,
}

impl Placed {
    /// Contiguous, or `padded`: gaps after each head, row and batch, and a 16-byte offset.
    pub fn new(shape: [usize; 4], padded: bool) -> Self {
        let [_, s, h, d] = shape;
        let row = h * (d + 8) + 8;
        match padded {
            true => Placed {
                shape,
                strides: [s * row + 16, row, d + 8, 1],
                offset: 8,
            },
            false => Placed {
                shape,
                strides: [s * h * d, h * d, d, 1],
                offset: 0,
            },
        }
    }

    /// Buffer positions of the elements, in logical row-major order.
    pub fn positions(&self) -> Vec<usize> {
        let ([b, s, h, d], st) = (self.shape, self.strides);
        let mut v = Vec::with_capacity(b * s * h * d);
        for i in 0..b {
            for j in 0..s {
                for k in 0..h {
                    let base = self.offset + i * st[0] + j * st[1] + k * st[2];
                    v.extend(base..base + d);
                }
            }
        }
        v
    }

    /// Buffer length: the span plus 8 elements of tail padding (never zero).
    pub fn buffer_len(&self) -> usize {
        self.positions().last().map_or(self.offset, |p| p + 1) + 8
    }

    pub fn view<'a, T>(&self, buf: &'a CudaSlice<T>) -> Tensor4<'a, T> {
        Tensor4::strided(buf.slice(self.offset..), self.shape, self.strides)
    }

    pub fn view_mut<'a, T>(&self, buf: &'a mut CudaSlice<T>) -> Tensor4Mut<'a, T> {
        Tensor4Mut::strided(buf.slice_mut(self.offset..), self.shape, self.strides)
    }
}

/// `n` standard-normal values rounded to `T`, and the same values as f64.
pub fn rounded<T: Element>(rng: &mut Rng, n: usize) -> (Vec<T>, Vec<f64>) {
    let x: Vec<T> = rng.normal_vec(n).into_iter().map(T::from_f32).collect();
    let f = x.iter().map(|v| v.to_f32() as f64).collect();
    (x, f)
}

/// Uploads `vals` at `p`'s positions of a NaN-filled buffer.
pub fn upload<T: Element>(
    s: &Arc<CudaStream>,
    p: &Placed,
    vals: &[T],
) -> Result<CudaSlice<T>, DriverError> {
    let mut buf = vec![T::from_f32(f32::NAN); p.buffer_len()];
    for (&i, &x) in p.positions().iter().zip(vals) {
        buf[i] = x;
    }
    s.clone_htod(&buf)
}

/// The causal mask or none, scale `1 / sqrt(d)` unless `scale`.
pub fn attn_params(causal: bool, scale: Option<f32>) -> AttnParams<'static> {
    let p = AttnParams::new().with_mask(if causal { Mask::Causal } else { Mask::None });
    match scale {
        Some(s) => p.with_scale(s),
        None => p,
    }
}

/// A contiguous `[b, n1, n2, d]` host tensor rewritten as contiguous `[b, n2, n1, d]`.
fn swap_middle<T: Copy>(x: &[T], [b, n1, n2, d]: [usize; 4]) -> Vec<T> {
    assert_eq!(x.len(), b * n1 * n2 * d);
    let mut y = Vec::with_capacity(x.len());
    for i in 0..b {
        for k in 0..n2 {
            for j in 0..n1 {
                let at = ((i * n1 + j) * n2 + k) * d;
                y.extend_from_slice(&x[at..at + d]);
            }
        }
    }
    y
}

/// A contiguous `[b, s, h, d]` host tensor rewritten as contiguous `[b, h, s, d]`.
pub fn bshd_to_bhsd<T: Copy>(x: &[T], shape: [usize; 4]) -> Vec<T> {
    swap_middle(x, shape)
}

/// A contiguous `[b, h, s, d]` host tensor rewritten as contiguous `[b, s, h, d]` (`bshd`
/// is the logical shape `[b, s, h, d]`).
pub fn bhsd_to_bshd<T: Copy>(x: &[T], [b, s, h, d]: [usize; 4]) -> Vec<T> {
    swap_middle(x, [b, h, s, d])
}

/// Index into lse `[b, h, sq]` of logical o element `i` (o's shape `[b, sq, h, d]`).
pub fn lse_index([_, sq, h, d]: [usize; 4], i: usize) -> usize {
    let row = i / d;
    let (bi, si, hi) = (row / (sq * h), (row / h) % sq, row % h);
    (bi * h + hi) * sq + si
}

/// The o rel-L2 tolerance of `dtype`.
pub fn o_tol(dtype: DType) -> f64 {
    if dtype == DType::Bf16 { 3e-3 } else { 4e-4 }
}

/// Checks a forward's o (`o`, logical `[b, sq, h, d]` order, as f64) against the
/// reference's (`want_o`, `want_lse`): every element of a row the reference fully masks
/// (lse -inf) exactly 0, then the rel-L2 error within `o_tol(dtype)`. Adds what fails to
/// `problems`; returns the rel-L2 error.
pub fn check_o(
    o: &[f64],
    want_o: &[f64],
    want_lse: &[f64],
    qs: [usize; 4],
    dtype: DType,
    problems: &mut Vec<String>,
) -> f64 {
    let masked_nonzero = (0..o.len())
        .filter(|&i| want_lse[lse_index(qs, i)] == f64::NEG_INFINITY && o[i] != 0.0)
        .count();
    if masked_nonzero > 0 {
        problems.push(format!(
            "{masked_nonzero} o elements of fully masked rows not 0"
        ));
    }
    let o_err = rel_l2(o, want_o);
    let tol = o_tol(dtype);
    let o_ok = o_err <= tol; // false for NaN
    if !o_ok {
        problems.push(format!("o rel-L2 {o_err:.3e} > {tol:.0e}"));
    }
    o_err
}

/// One lse element's error: `|got - want|`, 0 where both are -inf (a fully masked row),
/// infinite where only `want` is (NaN where `got` is NaN).
pub fn lse_abs_err(got: f32, want: f64) -> f64 {
    if want == f64::NEG_INFINITY {
        if got == f32::NEG_INFINITY {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (got as f64 - want).abs()
    }
}

/// One forward case's result: o's rel-L2 error against the reference, lse's largest
/// absolute error, and the problems found (none: the case passed).
pub struct Outcome {
    pub o_err: f64,
    pub lse_err: f64,
    pub problems: Vec<String>,
}

/// Reports one forward case: prints its line (`{desc}  o_rel_l2=.. lse_abs=..  ok`, its
/// problems instead of `ok`, or `{desc}  ERROR ..`), raises `worst` (f16, bf16) to its o
/// error (infinite for NaN) and adds a failing case to `failures`.
pub fn report_case(
    desc: &str,
    dtype: DType,
    res: Result<Outcome, Box<dyn std::error::Error>>,
    worst: &mut [f64; 2],
    failures: &mut Vec<String>,
) {
    match res {
        Ok(out) => {
            let w = &mut worst[(dtype == DType::Bf16) as usize];
            *w = if out.o_err.is_nan() {
                f64::INFINITY
            } else {
                w.max(out.o_err)
            };
            let status = if out.problems.is_empty() {
                "ok".to_string()
            } else {
                out.problems.join("; ")
            };
            println!(
                "{desc}  o_rel_l2={:.2e} lse_abs={:.2e}  {status}",
                out.o_err, out.lse_err
            );
            if !out.problems.is_empty() {
                failures.push(format!("{desc}: {status}"));
            }
        }
        Err(e) => {
            println!("{desc}  ERROR {e}");
            failures.push(format!("{desc}: error {e}"));
        }
    }
}

/// Runs the check of each problem in its dtype (`f16` or `bf16`, seeded per problem) and
/// panics with every failure: the problems a check returns, or its error.
pub fn for_each_problem<P: std::fmt::Debug>(
    problems: &[P],
    dtype: impl Fn(&P) -> DType,
    f16: impl Fn(&P, u64) -> Result<Vec<String>, Box<dyn std::error::Error>>,
    bf16: impl Fn(&P, u64) -> Result<Vec<String>, Box<dyn std::error::Error>>,
) {
    let mut failures = Vec::new();
    for (i, pr) in problems.iter().enumerate() {
        let seed = 0xa11c ^ ((i as u64) << 20);
        let res = match dtype(pr) {
            DType::F16 => f16(pr, seed),
            DType::Bf16 => bf16(pr, seed),
        };
        match res {
            Ok(p) if p.is_empty() => {}
            Ok(p) => failures.push(format!("{pr:?}: {}", p.join("; "))),
            Err(e) => failures.push(format!("{pr:?}: error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Offsets `[0, l0, l0 + l1, ..]` of packed sequences of lengths `lens` (`cu_seqlens`).
pub fn cu(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v = vec![0];
    for l in lens {
        v.push(v.last().unwrap() + l);
    }
    v
}

/// The runtimes a varlen case runs on: the GPU's own (from compute capability 9.0 the
/// varlen backward's wide rows at d64-d128) and, where the GPU has 9.0 or more, one
/// planning as an A100 (the standard rows sm_80-sm_89 run).
pub fn varlen_runtimes() -> Vec<(&'static str, flash_runtime::FlashAttention)> {
    let rt = device();
    let mut v = vec![("gpu", rt)];
    if v[0].1.compute_capability() >= (9, 0) {
        let mut a100 = device();
        a100.limit_compute_capability(8, 0);
        v.push(("as 8.0", a100));
    }
    v
}

/// `n` from the env var `var` (a sanitizer's subset: every n-th case), default 1.
pub fn every_nth(var: &str) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// Panics listing `failures`, if any.
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One gradient against its reference: the rel-L2 error of `got` (host copy), a problem
/// when above `tol` (where the reference is not all zero), and one when `again` (a second
/// run of deterministic mode) differs in any bit.
pub fn check_grad<T: flash_runtime::Element>(
    name: &str,
    (got, again): (&[T], Option<&[T]>),
    want: &[f64],
    tol: f64,
    problems: &mut Vec<String>,
) -> f64 {
    let h: Vec<f64> = got.iter().map(|x| x.to_f32() as f64).collect();
    let e = flash_runtime::reference::rel_l2(&h, want);
    if want.iter().any(|&x| x != 0.0) && !(e <= tol) {
        problems.push(format!("{name} rel-L2 {e:.3e} > {tol:.1e}"));
    }
    let bits = |x: &[T]| x.iter().map(|v| v.to_f32().to_bits()).collect::<Vec<u32>>();
    if again.is_some_and(|a| bits(a) != bits(got)) {
        problems.push(format!(
            "{name}: deterministic mode not bitwise reproducible"
        ));
    }
    e
}

/// The GPU's runtime, planning within `FLASH_PTX_TEST_SMEM` bytes of shared memory per
/// block where that variable is set (`101376`: RTX 30/40, L4, L40's 99 KiB), so the whole
/// GPU matrix runs on the rows such GPUs get (`FlashAttention::limit_smem`), and with
/// `FLASH_PTX_TEST_SMEM_SM` bytes per SM (`167936`: an A100's 164 KiB;
/// `FlashAttention::limit_smem_per_sm`), and with `FLASH_PTX_TEST_FWD_ARCH` (`sm80`,
/// `sm90a`; default `auto`) fixing the forward's kernels (`FlashAttention::set_forward_arch`:
/// on compute capability 9.0 `auto` runs the sm_90a forward at d64/d128, so `sm80` is how
/// the forward matrix covers the sm_80 kernels there).
pub fn device() -> flash_runtime::FlashAttention {
    let mut rt = flash_runtime::FlashAttention::on_device(0)
        .unwrap_or_else(|e| panic!("GPU tests need a GPU: {e}"));
    let bytes = |var| std::env::var(var).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(b) = bytes("FLASH_PTX_TEST_SMEM") {
        rt.limit_smem(b);
    }
    if let Some(b) = bytes("FLASH_PTX_TEST_SMEM_SM") {
        rt.limit_smem_per_sm(b);
    }
    match std::env::var("FLASH_PTX_TEST_FWD_ARCH").as_deref() {
        Err(_) | Ok("auto") => {}
        Ok("sm80") => rt.set_forward_arch(flash_runtime::ForwardArch::Sm80),
        Ok("sm90a") => rt.set_forward_arch(flash_runtime::ForwardArch::Sm90a),
        Ok(other) => panic!("FLASH_PTX_TEST_FWD_ARCH={other}: auto, sm80 or sm90a"),
    }
    rt
}

/// Prints how many kernels `rt` loaded per tiling, naming the compact ones (which rows a
/// run under `FLASH_PTX_TEST_SMEM` took).
pub fn print_tilings(rt: &flash_runtime::FlashAttention) {
    use flash_codegen::Tiling;
    let specs = rt.loaded_specs();
    let count = |t: Tiling| specs.iter().filter(|s| s.tiling == t).count();
    let compact: Vec<String> = specs
        .iter()
        .filter(|s| s.tiling == Tiling::Compact)
        .map(|s| s.name())
        .collect();
    println!(
        "smem limit {} bytes ({} per SM): {} kernels loaded ({} standard, {} long, {} wide, {} compact: {})",
        rt.smem_limit(),
        rt.smem_per_sm(),
        specs.len(),
        count(Tiling::Standard),
        count(Tiling::Long),
        count(Tiling::Wide),
        compact.len(),
        compact.join(", ")
    );
}
