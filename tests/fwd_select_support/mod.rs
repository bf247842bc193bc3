//! Helpers of `tests/gpu_fwd_select.rs`: a case's q, k, v on the device in one of four
//! layouts (packed qkv, PyTorch `[b, h, s, d]`, padded, contiguous), a `forward_into`
//! into NaN-poisoned outputs with guard bands, and the checks of its outputs against the
//! float64 reference.
#![allow(dead_code)]

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use flash_codegen::DType;
use flash_runtime::reference::{RefOutput, Shape, attention_forward};
use flash_runtime::rng::Rng;
use flash_runtime::{AttnParams, Element, FlashAttention, Tensor4, bhsd_layout};

use crate::gpu_support::{Placed, attn_params, lse_abs_err, lse_index, rounded, upload};

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

pub const GUARD: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// q, k, v views into one `[b, s, 3, h, d]` buffer; o contiguous.
    Packed,
    /// q, k, v and o in PyTorch's `[b, h, s, d]` storage.
    Bhsd,
    /// gaps after each head, row and batch, and a 16-byte offset (gpu_support's).
    Padded,
    Contiguous,
}

#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub b: usize,
    pub sq: usize,
    pub sk: usize,
    pub h: usize,
    pub hk: usize,
    pub d: usize,
    pub dtype: DType,
    pub causal: bool,
    pub layout: Layout,
    pub scale: Option<f32>,
    pub lse: bool,
}

/// q, k, v of a case on the device, and where they and o sit.
pub struct Setup<T> {
    pub c: Case,
    /// One buffer (packed) or q, k, v's own.
    pub bufs: Vec<CudaSlice<T>>,
    pub ins: [Placed; 3],
    pub out: Placed,
    /// q, k, v as f64, contiguous `[b, s, h, d]`.
    pub host: [Vec<f64>; 3],
}

/// One forward's outputs (whole buffers, guard bands included).
pub struct Run<T> {
    pub o: Vec<T>,
    pub lse: Vec<f32>,
}

pub fn setup<T: Element>(stream: &Arc<CudaStream>, c: Case, seed: u64) -> Res<Setup<T>> {
    let (qs, ks) = ([c.b, c.sq, c.h, c.d], [c.b, c.sk, c.hk, c.d]);
    let at = |shape: [usize; 4], strides, offset| Placed {
        shape,
        strides,
        offset,
    };
    let bhsd = |[b, s, h, d]: [usize; 4]| at([b, s, h, d], bhsd_layout([b, h, s, d]).1, 0);
    let (ins, out) = match c.layout {
        Layout::Packed => {
            assert!(
                c.sq == c.sk && c.h == c.hk,
                "{c:?}: packed qkv needs one shape"
            );
            let st = [c.sq * 3 * c.h * c.d, 3 * c.h * c.d, c.d, 1];
            let p = |i: usize| at(qs, st, i * c.h * c.d);
            ([p(0), p(1), p(2)], Placed::new(qs, false))
        }
        Layout::Bhsd => ([bhsd(qs), bhsd(ks), bhsd(ks)], bhsd(qs)),
        Layout::Padded | Layout::Contiguous => {
            let pad = c.layout == Layout::Padded;
            let p = |s| Placed::new(s, pad);
            ([p(qs), p(ks), p(ks)], p(qs))
        }
    };
    let mut rng = Rng::new(seed);
    let vals: Vec<(Vec<T>, Vec<f64>)> = (ins.iter())
        .map(|p| rounded::<T>(&mut rng, p.shape.iter().product()))
        .collect();
    let bufs = if c.layout == Layout::Packed {
        let len = ins.iter().map(Placed::buffer_len).max().unwrap_or(1);
        let mut host = vec![T::from_f32(f32::NAN); len];
        for (p, (x, _)) in ins.iter().zip(&vals) {
            p.positions().iter().zip(x).for_each(|(&i, &x)| host[i] = x);
        }
        vec![stream.clone_htod(&host)?]
    } else {
        let up = |(p, (x, _)): (&Placed, &(Vec<T>, Vec<f64>))| upload(stream, p, x);
        ins.iter().zip(&vals).map(up).collect::<Result<_, _>>()?
    };
    let [q, k, v]: [(Vec<T>, Vec<f64>); 3] = vals.try_into().map_err(|_| "three tensors")?;
    let host = [q.1, k.1, v.1];
    Ok(Setup {
        c,
        bufs,
        ins,
        out,
        host,
    })
}

impl<T: Element> Setup<T> {
    pub fn views(&self) -> [Tensor4<'_, T>; 3] {
        let packed = self.c.layout == Layout::Packed;
        std::array::from_fn(|i| self.ins[i].view(&self.bufs[if packed { 0 } else { i }]))
    }

    /// `forward_into` on `rt` into a NaN-poisoned o (in `self.out`'s layout, plus a guard
    /// band) and lse (plus a guard band; passed only when the case asks).
    pub fn run(
        &self,
        rt: &FlashAttention,
        stream: &Arc<CudaStream>,
        p: &AttnParams,
    ) -> Res<Run<T>> {
        let nan_o = vec![T::from_f32(f32::NAN); self.out.buffer_len() + GUARD];
        let (mut o_buf, mut lse_buf) = (
            stream.clone_htod(&nan_o)?,
            stream.clone_htod(&vec![f32::NAN; self.lse_len() + GUARD])?,
        );
        {
            let [q, k, v] = self.views();
            let lse = self.c.lse.then(|| lse_buf.as_view_mut());
            let mut o = self.out.view_mut(&mut o_buf);
            rt.forward_into(stream, &q, &k, &v, &mut o, lse, p)?;
        }
        let (o, lse) = (stream.clone_dtoh(&o_buf)?, stream.clone_dtoh(&lse_buf)?);
        Ok(Run { o, lse })
    }

    pub fn lse_len(&self) -> usize {
        self.c.b * self.c.h * self.c.sq
    }

    pub fn name(
        &self,
        rt: &FlashAttention,
        stream: &Arc<CudaStream>,
        p: &AttnParams,
    ) -> Res<String> {
        let [q, k, v] = self.views();
        Ok(rt
            .forward_kernel_name(stream, &q, &k, &v, p)?
            .ok_or("no kernel")?)
    }

    /// The float64 reference's o and lse.
    pub fn reference(&self) -> Res<RefOutput> {
        let c = self.c;
        let shape = Shape::new(c.b, c.sq, c.sk, c.h, c.hk, c.d);
        let [q, k, v] = &self.host;
        Ok(attention_forward(
            &shape,
            q,
            k,
            v,
            c.causal,
            c.scale.map(f64::from),
        )?)
    }

    /// `r`'s (o rel-L2, lse max abs error) against the reference's `want`, and its
    /// problems: an o element outside o's view or an lse element past its end (or any,
    /// without lse) written, a fully masked row not 0.
    pub fn check(&self, r: &Run<T>, want: &RefOutput, problems: &mut Vec<String>) -> (f64, f64) {
        let c = self.c;
        let pos = self.out.positions();
        let mut in_view = vec![false; r.o.len()];
        pos.iter().for_each(|&p| in_view[p] = true);
        let outside = (0..r.o.len())
            .filter(|&p| !in_view[p] && !r.o[p].to_f32().is_nan())
            .count();
        if outside > 0 {
            problems.push(format!("{outside} o elements outside its view written"));
        }
        let n = if c.lse { self.lse_len() } else { 0 };
        if r.lse[n..].iter().any(|x| !x.is_nan()) {
            problems.push("lse written past its end (or without an lse)".into());
        }
        let o: Vec<f64> = pos.iter().map(|&p| r.o[p].to_f32() as f64).collect();
        let qs = [c.b, c.sq, c.h, c.d];
        let masked = (0..o.len())
            .filter(|&i| want.lse[lse_index(qs, i)] == f64::NEG_INFINITY && o[i] != 0.0)
            .count();
        if masked > 0 {
            problems.push(format!("{masked} o elements of fully masked rows not 0"));
        }
        let lse_err = (r.lse[..n].iter().zip(&want.lse))
            .map(|(&g, &w)| lse_abs_err(g, w))
            .map(|e| if e.is_nan() { f64::INFINITY } else { e })
            .fold(0.0f64, f64::max);
        if lse_err > 1e-3 {
            problems.push(format!("lse max abs error {lse_err:.2e} > 1e-3"));
        }
        let o_err = flash_runtime::reference::rel_l2(&o, &want.o);
        (if o_err.is_nan() { f64::INFINITY } else { o_err }, lse_err)
    }
}

pub fn params(c: &Case) -> AttnParams<'static> {
    attn_params(c.causal, c.scale)
}

pub fn bits<T: Element>(r: &Run<T>) -> (Vec<u32>, Vec<u32>) {
    let o = r.o.iter().map(|x| x.to_f32().to_bits()).collect();
    (o, r.lse.iter().map(|x| x.to_bits()).collect())
}
