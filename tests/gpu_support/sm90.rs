//! One sm_90a forward case's device state, shared by tests/gpu_fwd_sm90.rs and
//! tests/gpu_fwd_sm90_scores.rs: bf16/f16-rounded random q, k, v (contiguous `[b, s, h,
//! d]`), o and lse NaN-poisoned with a guard band past their ends, and the errors of an
//! output against the float64 reference, the sm_80 forward's on the same inputs beside.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use flash_runtime::reference::{Modifiers, RefOutput, Shape, attention_forward_with, rel_l2};
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, Element, FlashAttention, Sm90FwdShape, Tensor4};

use super::{lse_abs_err, rounded};

/// Poisoned elements past o's and lse's ends that no launch may write.
pub const GUARD: usize = 4096;

/// A case's inputs (host values as f64, device buffers) and its poisoned outputs.
pub struct Sm90Case<T> {
    pub sh: Sm90FwdShape,
    pub stream: Arc<CudaStream>,
    host: [Vec<f64>; 3],
    pub q: CudaSlice<T>,
    pub k: CudaSlice<T>,
    pub v: CudaSlice<T>,
    pub o: CudaSlice<T>,
    pub lse: CudaSlice<f32>,
}

impl<T: Element> Sm90Case<T> {
    /// Fresh inputs from `seed` on `rt`'s default stream.
    pub fn new(rt: &FlashAttention, sh: Sm90FwdShape, seed: u64) -> Self {
        Self::with_q_times(rt, sh, seed, 1)
    }

    /// [`Sm90Case::new`] with q multiplied by `amp` (a power of two: exact), for scores
    /// whose row maxima jump from block to block (the softmax's reference moves).
    pub fn with_q_times(rt: &FlashAttention, sh: Sm90FwdShape, seed: u64, amp: u16) -> Self {
        assert!(amp.is_power_of_two(), "q times {amp}: not exact");
        Self::with_inputs(rt, sh, seed, (amp, 0.0))
    }

    /// [`Sm90Case::new`] with q times `amp`, then q's elements less `shift` and k's plus
    /// `shift` (rounded to `T`, the host copies the rounded values): `shift` of a few
    /// units makes every score of a row large and negative.
    pub fn with_inputs(
        rt: &FlashAttention,
        sh: Sm90FwdShape,
        seed: u64,
        (amp, shift): (u16, f32),
    ) -> Self {
        let stream = rt.context().default_stream();
        let (b, sq, sk, h, hk, d) = sh.sizes();
        let (nq, nk) = (b * sq * h * d, b * sk * hk * d);
        let mut rng = Rng::new(seed);
        let ((mut q, mut qf), (mut k, mut kf), (v, vf)) = (
            rounded::<T>(&mut rng, nq),
            rounded::<T>(&mut rng, nk),
            rounded::<T>(&mut rng, nk),
        );
        let remap = |x: &mut [T], xf: &mut [f64], f: &dyn Fn(f64) -> f64| {
            for (x, xf) in x.iter_mut().zip(xf.iter_mut()) {
                *x = T::from_f32(f(*xf) as f32);
                *xf = x.to_f32() as f64;
            }
        };
        let s = f64::from(shift);
        remap(&mut q, &mut qf, &|x| x * f64::from(amp) - s);
        remap(&mut k, &mut kf, &|x| x + s);
        let up = |x: &Vec<T>| stream.clone_htod(x).unwrap();
        let (q, k, v) = (up(&q), up(&k), up(&v));
        let o = stream
            .clone_htod(&vec![T::from_f32(f32::NAN); nq + GUARD])
            .unwrap();
        let lse = stream
            .clone_htod(&vec![f32::NAN; b * h * sq + GUARD])
            .unwrap();
        Sm90Case {
            sh,
            stream,
            host: [qf, kf, vf],
            q,
            k,
            v,
            o,
            lse,
        }
    }

    /// o and lse as the launch left them, without their guard bands (which must still
    /// hold NaN: nothing written past the ends).
    pub fn outputs(&self) -> (Vec<T>, Vec<f32>) {
        let (b, sq, _, h, _, d) = self.sh.sizes();
        let (nq, nl) = (b * sq * h * d, b * h * sq);
        let mut o: Vec<T> = self.stream.clone_dtoh(&self.o).unwrap();
        let mut lse: Vec<f32> = self.stream.clone_dtoh(&self.lse).unwrap();
        let sh = self.sh;
        assert!(
            o[nq..].iter().all(|x| x.to_f32().is_nan()),
            "{sh:?}: o written past its end"
        );
        assert!(
            lse[nl..].iter().all(|x| x.is_nan()),
            "{sh:?}: lse written past its end"
        );
        o.truncate(nq);
        lse.truncate(nl);
        (o, lse)
    }

    /// The float64 reference of the inputs under `mods`.
    pub fn reference(&self, mods: &Modifiers) -> RefOutput {
        let (b, sq, sk, h, hk, d) = self.sh.sizes();
        let [q, k, v] = &self.host;
        attention_forward_with(&Shape::new(b, sq, sk, h, hk, d), q, k, v, mods, None).unwrap()
    }

    /// (o rel-L2, lse max abs error) of `(o, lse)` against `r`; a NaN lse is an infinite
    /// error (f64::max would skip it).
    pub fn errors(&self, r: &RefOutput, (o, lse): (&[T], &[f32])) -> (f64, f64) {
        let o: Vec<f64> = o.iter().map(|y| y.to_f32() as f64).collect();
        let lse_err = (lse.iter().zip(&r.lse))
            .map(|(&g, &w)| lse_abs_err(g, w))
            .map(|e| if e.is_nan() { f64::INFINITY } else { e })
            .fold(0.0f64, f64::max);
        (rel_l2(&o, &r.o), lse_err)
    }

    /// The errors of `rt`'s `forward` (the sm_80 kernels where the caller set
    /// `ForwardArch::Sm80`) with `params` on the same inputs.
    pub fn sm80_errors(
        &self,
        rt: &FlashAttention,
        params: &AttnParams,
        r: &RefOutput,
    ) -> (f64, f64) {
        let (b, sq, sk, h, hk, d) = self.sh.sizes();
        let view = |x, s, hh| Tensor4::contiguous(x, [b, s, hh, d]);
        let out = rt
            .forward(
                &self.stream,
                &view(&self.q, sq, h),
                &view(&self.k, sk, hk),
                &view(&self.v, sk, hk),
                params,
            )
            .unwrap_or_else(|e| panic!("sm80 {:?}: {e}", self.sh));
        let o: Vec<T> = self.stream.clone_dtoh(&out.o).unwrap();
        let lse: Vec<f32> = self.stream.clone_dtoh(&out.lse).unwrap();
        self.errors(r, (&o[..b * sq * h * d], &lse[..b * h * sq]))
    }
}
