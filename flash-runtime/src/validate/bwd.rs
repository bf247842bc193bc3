//! Backward checks: one pure function from the call's tensors, lse, scratch and options to
//! the ordered kernel launches (or the zero-fills of an empty problem).
//!
//! Launches, atomic mode (default): `BwdPre` (D = rowsum(dO * O), zeroes `dq_accum`), `Bwd`
//! (dK, dV; dQ accumulated in f32 with atomics), `BwdPost` (dq = dq_accum * scale).
//! Deterministic mode: `BwdPre` (D only), `Bwd` (dK, dV only), `BwdDq` (dQ without atomics,
//! bitwise reproducible; recomputes S and dP: 7 matmuls instead of 5, ~7/5 of the FLOPs).
//!
//! Edge cases: kernels run only when batch, heads, seqlen_q and seqlen_k are all non-zero.
//! Otherwise every gradient with elements is zero-filled instead (`seqlen_k == 0`: dq;
//! `seqlen_q == 0` or `heads == 0`: dk and dv), one memset per contiguous run of its
//! elements ([`super::contiguous_runs`]).

use flash_codegen::abi::{self, grid};
use flash_codegen::{Arch, KernelSpec, Mask, Pass, Tiling};

use super::bwd_split::{group_split_shift, main_spec, rule_rows};
use super::fwd::check_lse;
use super::modifiers::{AlibiDesc, call_scores, check_window_lengths, modifier_param};
use super::split_rule::GpuFill;
use super::{
    BufDesc, LaunchPlan, ParamValue, TensorDesc, bind_spec_params, check_dtypes, check_grid,
    check_problem, contiguous_runs, launch, place, prod, shape_err, tensor_param, u32_of,
};
use crate::error::{FlashError, Result};
use crate::params::{AttnParams, BwdOptions};

/// The backward's scratch buffers: D (f32 `[batch, heads, seqlen_q]`), in atomic mode the
/// dQ accumulator (f32, `batch * heads * 16 ceil(seqlen_q / 16) * head_dim` elements in
/// the kernels' fragment order: opaque scratch) and, when the main pass splits a
/// grouped-query group over several CTAs, their f32 partial dK and dV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchDesc {
    /// D = rowsum(dO * O).
    pub dvec: BufDesc,
    /// The dQ accumulator; not used (may be `None`) in deterministic mode.
    pub dq_accum: Option<BufDesc>,
    /// The group splits' partial dK and dV ([`ScratchNeed::dkv_partial`]); not used (may
    /// be `None`) with one split.
    pub dkv_partial: Option<BufDesc>,
}

/// Scratch a backward call needs, in f32 elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchNeed {
    /// `batch * heads * seqlen_q`.
    pub dvec: usize,
    /// `batch * heads * 16 ceil(seqlen_q / 16) * head_dim` in atomic mode (whole 16-row tiles),
    /// 0 in deterministic mode.
    pub dq_accum: usize,
    /// `splits * 2 * batch * seqlen_k * heads_k * head_dim` when the main pass splits each
    /// grouped-query group over `splits > 1` CTAs ([`crate::BwdOptions::group_splits`]),
    /// else 0.
    pub dkv_partial: usize,
}

impl ScratchNeed {
    /// The scratch of a problem with q of shape `[batch, seqlen_q, heads, head_dim]`
    /// (saturating: an absurd shape needs more than any device has).
    pub fn of(q_shape: [usize; 4], deterministic: bool) -> Self {
        let [b, sq, h, d] = q_shape;
        ScratchNeed {
            dvec: prod(&[b, h, sq]),
            dq_accum: if deterministic {
                0
            } else {
                prod(&[b, sq.div_ceil(16), 16, h, d])
            },
            dkv_partial: 0,
        }
    }

    /// [`ScratchNeed::of`] plus the partial dK and dV of `splits` group splits of a
    /// problem with k of shape `k_shape` (`[batch, seqlen_k, heads_k, head_dim]`; none for
    /// one split).
    pub fn with_splits(self, k_shape: [usize; 4], splits: u32) -> Self {
        let dkv_partial = match splits {
            0 | 1 => 0,
            s => prod(&[
                s as usize, 2, k_shape[0], k_shape[1], k_shape[2], k_shape[3],
            ]),
        };
        ScratchNeed {
            dkv_partial,
            ..self
        }
    }

    /// Bytes of device memory (f32 elements times 4, saturating).
    pub fn bytes(&self) -> usize {
        self.dvec
            .saturating_add(self.dq_accum)
            .saturating_add(self.dkv_partial)
            .saturating_mul(4)
    }
}

/// All arguments of a backward call, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwdArgs<'a> {
    /// Queries `[b, sq, h, d]`.
    pub q: TensorDesc,
    /// Keys `[b, sk, hk, d]`.
    pub k: TensorDesc,
    /// Values `[b, sk, hk, d]`.
    pub v: TensorDesc,
    /// The forward's output `[b, sq, h, d]`.
    pub o: TensorDesc,
    /// The gradient of the loss w.r.t. o, `[b, sq, h, d]`.
    pub d_o: TensorDesc,
    /// dQ output `[b, sq, h, d]`.
    pub dq: TensorDesc,
    /// dK output `[b, sk, hk, d]`.
    pub dk: TensorDesc,
    /// dV output `[b, sk, hk, d]`.
    pub dv: TensorDesc,
    /// The forward's log-sum-exp, f32 `[b, h, sq]`.
    pub lse: BufDesc,
    /// Scratch; `None` plans a dry run: everything else is checked, [`BwdPlan::scratch`]
    /// says what to allocate, and the scratch pointers in the parameters are 0.
    pub scratch: Option<ScratchDesc>,
    /// Mask, scale and modifiers: the forward's.
    pub params: AttnParams<'a>,
    /// ALiBi's slopes (the buffer of `params.alibi`), or `None`.
    pub alibi: Option<AlibiDesc>,
    /// Atomic or deterministic dQ.
    pub opts: BwdOptions,
}

/// A gradient to zero-fill because no kernel writes it (an empty problem).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroFill {
    /// `dq`, `dk` or `dv`.
    pub tensor: &'static str,
    /// Elements per contiguous run.
    pub run_len: usize,
    /// Start of each run, in elements from the start of the tensor's view.
    pub starts: Vec<usize>,
}

/// A checked backward call.
#[derive(Clone, Debug, PartialEq)]
pub struct BwdPlan {
    /// Kernel launches in order: `BwdPre`, `Bwd`, `BwdKvSum` (only with more than one
    /// group split), then `BwdPost` (atomic mode) or `BwdDq` (deterministic mode); empty
    /// when the problem is empty.
    pub launches: Vec<LaunchPlan>,
    /// Gradients to zero-fill instead (only when `launches` is empty).
    pub zero_fill: Vec<ZeroFill>,
    /// Scratch the launches need (zero when there are none).
    pub scratch: ScratchNeed,
    /// False for a dry run (no scratch given) that has launches: not launchable as is.
    pub scratch_bound: bool,
}

impl BwdPlan {
    /// True when nothing is launched and nothing zero-filled.
    pub fn is_noop(&self) -> bool {
        self.launches.is_empty() && self.zero_fill.is_empty()
    }

    /// The launch of `pass`, if planned.
    pub fn launch(&self, pass: Pass) -> Option<&LaunchPlan> {
        self.launches.iter().find(|l| l.spec.pass == pass)
    }
}

fn same_shape(name: &str, t: &TensorDesc, like: &str, want: [usize; 4], dims: &str) -> Result<()> {
    if t.shape == want {
        return Ok(());
    }
    Err(shape_err(format!(
        "{name} has shape {:?} but {like} has {want:?}; {name} must be {dims} like {like}",
        t.shape
    )))
}

/// Scratch checks; returns the `dvec` and `dq_accum` pointers (0 where unused).
pub(crate) fn check_scratch(s: &ScratchDesc, need: &ScratchNeed) -> Result<(u64, u64)> {
    check_scratch_all(s, need).map(|(dvec, acc, _)| (dvec, acc))
}

/// Scratch checks; returns the `dvec`, `dq_accum` and `dkv_partial` pointers (0 where
/// unused).
pub(crate) fn check_scratch_all(s: &ScratchDesc, need: &ScratchNeed) -> Result<(u64, u64, u64)> {
    let check = |buffer: &'static str, b: &BufDesc, needed: usize| -> Result<u64> {
        if b.len < needed {
            return Err(FlashError::ScratchTooSmall {
                buffer,
                needed,
                available: b.len,
            });
        }
        if b.ptr % 16 != 0 || b.ptr == 0 {
            return Err(FlashError::Misaligned {
                tensor: buffer,
                why: format!("its pointer {:#x} is null or not 16-byte aligned", b.ptr),
            });
        }
        Ok(b.ptr)
    };
    let dvec = check("dvec", &s.dvec, need.dvec)?;
    let optional = |buffer: &'static str, b: &Option<BufDesc>, needed: usize| match (needed, b) {
        (0, _) => Ok(0), // not used: the kernels get 0
        (needed, Some(b)) => check(buffer, b, needed),
        (needed, None) => Err(FlashError::ScratchTooSmall {
            buffer,
            needed,
            available: 0,
        }),
    };
    let acc = optional("dq_accum", &s.dq_accum, need.dq_accum)?;
    let partial = optional("dkv_partial", &s.dkv_partial, need.dkv_partial)?;
    Ok((dvec, acc, partial))
}

/// Check a backward call and plan its launches (kernels of `arch`). The main pass runs
/// on its long-sequence tiling where the rule of [`KernelSpec::for_seqlen`] picks it; a
/// caller that launches its own kernels and has no PTX for it plans with
/// [`plan_bwd_with`] and `long_tiles: false`.
pub fn plan_bwd(a: &BwdArgs, arch: Arch) -> Result<BwdPlan> {
    plan_bwd_with(a, arch, true)
}

/// [`plan_bwd`], with the long-sequence tiling allowed or not (`long_tiles`: a runtime
/// that has no PTX for it and does not generate runs the standard tiling, which computes
/// the same).
pub fn plan_bwd_with(a: &BwdArgs, arch: Arch, long_tiles: bool) -> Result<BwdPlan> {
    plan_bwd_on(a, arch, long_tiles, u64::MAX)
}

/// [`plan_bwd_with`] for a GPU allowing `smem_optin` bytes of dynamic shared memory per
/// block: a main or dQ pass whose row (standard or long) needs more runs on its compact
/// row ([`KernelSpec::for_smem`]: d96 and up on RTX 30/40, L4, L40's 99 KiB), with its
/// own tiles' grid.
pub fn plan_bwd_on(a: &BwdArgs, arch: Arch, long_tiles: bool, smem_optin: u64) -> Result<BwdPlan> {
    plan_bwd_fill(a, arch, long_tiles, GpuFill::per_block(smem_optin))
}

/// [`plan_bwd_on`] for a GPU of `gpu.sms` streaming multiprocessors, which the automatic
/// grouped-query split needs ([`group_split_shift`]; with `sms` 0 a group is split only
/// when [`BwdOptions::group_splits`] asks), and `gpu.smem_per_sm` bytes of shared memory
/// per SM, by which the main pass may take its compact row where that keeps more warps
/// per SM (with `long_tiles`, which allows the rows chosen for speed alone:
/// [`KernelSpec::for_smem_per_sm`]; an A100 at d64-d128). With more than one split the
/// launches are `BwdPre`, `Bwd`, `BwdKvSum`, then `BwdPost` or `BwdDq`.
pub fn plan_bwd_fill(a: &BwdArgs, arch: Arch, long_tiles: bool, gpu: GpuFill) -> Result<BwdPlan> {
    let smem_optin = gpu.smem_optin;
    let dtype = a.q.dtype;
    check_dtypes(
        dtype,
        &[
            ("k", &a.k),
            ("v", &a.v),
            ("o", &a.o),
            ("d_o", &a.d_o),
            ("dq", &a.dq),
            ("dk", &a.dk),
            ("dv", &a.dv),
        ],
    )?;
    let [b, sq, h, d] = a.q.shape;
    let [_, sk, hk, _] = a.k.shape;
    let (qdims, kdims) = (
        "[batch, seqlen_q, heads, head_dim]",
        "[batch, seqlen_k, heads_k, head_dim]",
    );
    same_shape("v", &a.v, "k", a.k.shape, kdims)?;
    for (name, t) in [("o", &a.o), ("d_o", &a.d_o), ("dq", &a.dq)] {
        same_shape(name, t, "q", a.q.shape, qdims)?;
    }
    for (name, t) in [("dk", &a.dk), ("dv", &a.dv)] {
        same_shape(name, t, "k", a.k.shape, kdims)?;
    }
    let (p, det) = (a.params, a.opts.deterministic);
    let (kernel_d, scale) = check_problem(&a.q, &a.k, p.softmax_scale)?;
    // (before the empty-problem return: a bad window or cap is an error whatever the sizes)
    let main_mask = p.kernel_mask_for(Pass::Bwd)?;
    let (scores, slopes) = call_scores(&p, a.alibi.as_ref(), (Pass::Bwd, main_mask), (b, h))?;
    // bwdpre and bwdpost: plain, no mask; bwd and bwddq: the call's mask and scores
    let spec = |pass: Pass, mask: Mask| KernelSpec {
        pass,
        head_dim: kernel_d,
        dtype,
        mask,
        scores: match pass.has_mask() {
            true => scores,
            false => flash_codegen::Scores::Plain,
        },
        tiling: Tiling::Standard,
        arch,
    };

    if b == 0 || h == 0 || sq == 0 || sk == 0 {
        let mut zero_fill = Vec::new();
        for (name, t) in [("dq", &a.dq), ("dk", &a.dk), ("dv", &a.dv)] {
            if !t.shape.contains(&0) {
                place(name, t, true)?;
                let (run_len, starts) = contiguous_runs(t.shape, t.strides);
                zero_fill.push(ZeroFill {
                    tensor: name,
                    run_len,
                    starts,
                });
            }
        }
        return Ok(BwdPlan {
            launches: Vec::new(),
            zero_fill,
            scratch: ScratchNeed::default(),
            scratch_bound: true,
        });
    }

    let pre = spec(Pass::BwdPre, Mask::None);
    let rows = rule_rows(sq, p.window_params());
    let main = main_spec(spec(Pass::Bwd, main_mask), rows, long_tiles, &a.opts, gpu)?;
    let last = match det {
        false => spec(Pass::BwdPost, Mask::None),
        true => spec(Pass::BwdDq, p.kernel_mask()).for_smem(smem_optin),
    };
    check_window_lengths(main_mask, (sq, sk), "seqlen_k")?;
    check_grid(sq, h, b, pre.tiles().block_m())?;
    let (sq32, sk32) = (u32_of(sq, "seqlen_q")?, u32_of(sk, "seqlen_k")?);
    let (b32, h32, hk32) = (b as u32, h as u32, hk as u32); // <= 65535: checked with the grid

    let tensors = [
        (&abi::Q, place("q", &a.q, false)?),
        (&abi::K, place("k", &a.k, false)?),
        (&abi::V, place("v", &a.v, false)?),
        (&abi::O, place("o", &a.o, false)?),
        (&abi::DO, place("d_o", &a.d_o, false)?),
        (&abi::DQ, place("dq", &a.dq, true)?),
        (&abi::DK, place("dk", &a.dk, true)?),
        (&abi::DV, place("dv", &a.dv, true)?),
    ];
    let lse = check_lse(&a.lse, b, h, sq)?;
    let shift = group_split_shift(&main, a.k.shape, h / hk, &a.opts, gpu.sms);
    let splits = 1u32 << shift;
    let need = ScratchNeed::of(a.q.shape, det).with_splits(a.k.shape, splits);
    let (dvec, dq_accum, dkv_partial) = match &a.scratch {
        Some(s) => check_scratch_all(s, &need)?,
        None => (0, 0, 0),
    };

    let value = |name: &str| {
        use ParamValue::{F32, U32, U64};
        let modifier = || modifier_param(&p, slopes, name);
        if let Some(t) = tensor_param(name, &tensors).or_else(modifier) {
            return Some(t);
        }
        Some(match name {
            "lse" => U64(lse),
            "dvec" => U64(dvec),
            "dq_accum" => U64(dq_accum),
            "dkv_partial" => U64(dkv_partial),
            "group_split_shift" => U32(shift),
            "seqlen_q" => U32(sq32),
            "seqlen_k" => U32(sk32),
            "head_dim" => U32(d as u32),
            "heads" => U32(h32),
            "heads_per_kv" => U32(h32 / hk32),
            "scale_log2" => F32((scale * std::f64::consts::LOG2_E) as f32),
            "softmax_scale" => F32(scale as f32),
            _ => return None,
        })
    };
    // (with more than one group split the main pass's CTAs write partials that the sum
    // pass adds into dk and dv)
    let sum = (splits > 1).then(|| spec(Pass::BwdKvSum, Mask::None));
    let mut launches = Vec::with_capacity(4);
    for s in [Some(pre), Some(main), sum, Some(last)]
        .into_iter()
        .flatten()
    {
        let mut g = grid(&s, b32, sq32, sk32, h32, hk32)
            .ok_or_else(|| FlashError::Internal(format!("{s} has no backward grid")))?;
        if s.pass == Pass::Bwd {
            // heads_k * splits <= heads, which the grid check bounded
            g[1] <<= shift;
        }
        launches.push(launch(s, g, bind_spec_params(&s, value)?));
    }
    Ok(BwdPlan {
        launches,
        zero_fill: Vec::new(),
        scratch: need,
        scratch_bound: a.scratch.is_some(),
    })
}
