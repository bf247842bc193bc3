//! Kernel layer: kernel parameters, loaded once and read through their ABI handles
//! ([`crate::abi::args`]: `p.get(SEQLEN_Q)`, `p.tensor(b, &Q, ..)`).

use crate::abi::{self, Arg, ArgKind, TensorArgs};
use crate::ptx::{AnyReg, B32, B64, Builder, F32, Param, ParamTy, Reg};
use crate::spec::Pass;

/// The kernel parameters, loaded once, read through their handles.
pub struct Params {
    /// Each scalar parameter's name and register, in ABI order.
    regs: Vec<(String, AnyReg)>,
    /// Whose parameters they are, for messages (`the fwd pass`).
    owner: String,
}

impl Params {
    /// Emits one `ld.param` per scalar parameter, in order. A by-value struct
    /// ([`ParamTy::Bytes`], a tensor map) is not loaded: it is read through its address
    /// ([`Builder::param_addr`]).
    pub fn load<T: Copy + Into<ParamTy>>(b: &mut Builder, params: &[Param<T>]) -> Self {
        let names = |p: &[Param<T>]| p.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let pass = Pass::ALL.into_iter().find(|&pass| {
            let abi: Vec<String> = abi::params(pass).iter().map(|d| d.name.into()).collect();
            abi == names(params)
        });
        let regs = params
            .iter()
            .filter(|p| matches!(p.param_ty(), ParamTy::Scalar(_)))
            .map(|p| (p.name.clone(), b.ld_param(p)))
            .collect();
        let owner = match pass {
            Some(pass) => format!("the {} pass", pass.name()),
            None => "this entry".to_string(),
        };
        Params { regs, owner }
    }

    fn find(&self, name: &str) -> AnyReg {
        self.regs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("generator bug: {} has no parameter {name}", self.owner))
            .1
    }

    /// The register holding parameter `a` (a generator bug if the pass lacks it).
    pub fn get<K: ArgKind>(&self, a: Arg<K>) -> Reg<K> {
        let r = self.find(a.name());
        K::reg(r).unwrap_or_else(|| {
            panic!(
                "generator bug: parameter {} of {} is {r:?}, its handle says {}",
                a.name(),
                self.owner,
                a.ty().what()
            )
        })
    }

    /// The row stride of tensor `t` (elements between sequence positions).
    pub fn row_stride(&self, t: &TensorArgs) -> Reg<B32> {
        self.get(t.row_stride)
    }

    /// Global byte address of `t[batch, row, head, 0]` for tensor `t` (2-byte elements):
    /// its handle (`&Q`) or, transitionally, its name (`"q"`).
    pub fn tensor(
        &self,
        b: &mut Builder,
        t: impl TensorRef,
        batch: Reg<B32>,
        row: Reg<B32>,
        head: Reg<B32>,
    ) -> Reg<B64> {
        let t = t.args();
        let base = b.cvta_global(self.get(t.ptr));
        let bs = self.get(t.batch_stride);
        let batch64 = b.cvt_u64_u32(batch);
        let off = b.mul_lo_u64(batch64, bs);
        let off = b.mad_wide_u32(head, self.get(t.head_stride), off);
        let off = b.mad_wide_u32(row, self.get(t.row_stride), off);
        let bytes = b.add_s64(off, off);
        b.add_s64(base, bytes)
    }

    // Transitional string look-ups: the kernels move to the handles above, then these go.

    /// Transitional (use [`Params::get`] with an `Arg<B32>`): a `u32` parameter.
    pub fn u32(&self, name: &str) -> Reg<B32> {
        self.named(name)
    }
    /// Transitional (use [`Params::get`] with an `Arg<B64>`): a `u64` parameter.
    pub fn u64(&self, name: &str) -> Reg<B64> {
        self.named(name)
    }
    /// Transitional (use [`Params::get`] with an `Arg<F32>`): an `f32` parameter.
    pub fn f32(&self, name: &str) -> Reg<F32> {
        self.named(name)
    }
    fn named<K: ArgKind>(&self, name: &str) -> Reg<K> {
        let r = self.find(name);
        K::reg(r)
            .unwrap_or_else(|| panic!("generator bug: parameter {name} of {} is {r:?}", self.owner))
    }
}

/// A tensor for [`Params::tensor`]: its handle (`&Q`) or, transitionally, its name.
pub trait TensorRef {
    /// The tensor's handle.
    fn args(&self) -> TensorArgs;
}

impl TensorRef for &TensorArgs {
    fn args(&self) -> TensorArgs {
        **self
    }
}

/// Transitional: the tensor named so (use the handle).
impl TensorRef for &str {
    fn args(&self) -> TensorArgs {
        *abi::args::tensor(self)
            .unwrap_or_else(|| panic!("generator bug: no tensor {self} in the ABI"))
    }
}

/// A per-row statistic's pointer parameter for [`row_stats_base`]: its handle
/// (`Arg<B64>`: [`abi::LSE`], [`abi::DVEC`]) or, transitionally, its name.
pub trait StatPtr {
    /// The register holding the pointer.
    fn reg(&self, p: &Params) -> Reg<B64>;
}

impl StatPtr for Arg<B64> {
    fn reg(&self, p: &Params) -> Reg<B64> {
        p.get(*self)
    }
}

/// Transitional: the pointer named so (use the handle).
impl StatPtr for &str {
    fn reg(&self, p: &Params) -> Reg<B64> {
        p.u64(self)
    }
}

/// Global address of `stat[batch, head, row0]` of a `[batch, heads, seqlen_q]` f32 array.
pub fn row_stats_base(
    b: &mut Builder,
    p: &Params,
    stat: impl StatPtr,
    heads: Reg<B32>,
    batch: Reg<B32>,
    head: Reg<B32>,
    row0: Reg<B32>,
) -> Reg<B64> {
    let bh = b.mad_lo_u32(batch, heads, head);
    let r = b.mul_wide_u32(bh, p.get(abi::SEQLEN_Q));
    let row0 = b.cvt_u64_u32(row0);
    let r = b.add_s64(r, row0);
    let bytes = b.shl_b64(r, 2);
    let base = b.cvta_global(stat.reg(p));
    b.add_s64(base, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{DQ_ACCUM, DVEC, HEAD_DIM, LSE, Q, SCALE_LOG2, SEQLEN_K, SEQLEN_Q, V};
    use crate::ptx::{LaunchBounds, print};

    /// The body a kernel opening emits, as PTX.
    fn body(pass: Pass, f: impl FnOnce(&mut Builder, &Params)) -> String {
        let mut b = Builder::new();
        let p = Params::load(&mut b, &abi::ir_params(pass));
        f(&mut b, &p);
        let e = b.finish("t", abi::ir_params(pass), LaunchBounds::default());
        let mut s = String::new();
        print::write_entry(&mut s, &e).unwrap();
        s
    }

    /// Handles and names emit the same PTX, the loads first, in ABI order.
    #[test]
    fn handles_read_what_names_read() {
        let typed = body(Pass::Fwd, |b, p| {
            let z = b.mov(0u32);
            p.tensor(b, &Q, z, z, z);
            p.tensor(b, &V, z, z, z);
            let s = b.mov(p.get(SCALE_LOG2));
            let _ = (s, p.row_stride(&Q), p.get(HEAD_DIM), p.get(SEQLEN_K));
            row_stats_base(b, p, LSE, z, z, z, z);
        });
        let named = body(Pass::Fwd, |b, p| {
            let z = b.mov(0u32);
            p.tensor(b, "q", z, z, z);
            p.tensor(b, "v", z, z, z);
            let s = b.mov(p.f32("scale_log2"));
            let _ = (
                s,
                p.u32("q_row_stride"),
                p.u32("head_dim"),
                p.u32("seqlen_k"),
            );
            row_stats_base(b, p, "lse", z, z, z, z);
        });
        assert_eq!(typed, named);
        let loads: Vec<&str> = typed.lines().filter(|l| l.contains("ld.param")).collect();
        assert_eq!(loads.len(), abi::FWD_PARAMS.len());
        for (l, d) in loads.iter().zip(&abi::FWD_PARAMS) {
            assert!(l.contains(&format!("[{}]", d.name)), "{l} vs {}", d.name);
        }
        assert_eq!(p_reg(Pass::BwdPre, DVEC), p_reg(Pass::BwdPre, DQ_ACCUM) - 1);
    }

    fn p_reg(pass: Pass, a: Arg<B64>) -> u32 {
        let mut b = Builder::new();
        Params::load(&mut b, &abi::ir_params(pass)).get(a).id()
    }

    /// Every handle a pass lists reads back with its class.
    #[test]
    fn every_pass_reads_its_handles() {
        for pass in Pass::ALL {
            let mut b = Builder::new();
            let p = Params::load(&mut b, &abi::entry_params(pass));
            for t in abi::TENSORS {
                if abi::params(pass).iter().any(|d| d.name == t.name()) {
                    let z = b.mov(0u32);
                    p.tensor(&mut b, &t, z, z, z);
                }
            }
            if abi::params(pass).iter().any(|d| d.name == "seqlen_q") {
                p.get(SEQLEN_Q);
            }
        }
    }

    #[test]
    #[should_panic(expected = "generator bug: the bwdpost pass has no parameter seqlen_k")]
    fn an_absent_parameter_names_itself_and_its_pass() {
        let mut b = Builder::new();
        Params::load(&mut b, &abi::ir_params(Pass::BwdPost)).get(SEQLEN_K);
    }

    /// A tensor map is declared but not loaded; the scalars around it are.
    #[test]
    fn a_tensor_map_is_not_loaded() {
        let descs = [
            SEQLEN_Q.desc("n"),
            abi::ParamDesc::new("tm", abi::AbiTy::TensorMap, "map"),
            LSE.desc("p"),
        ];
        let mut b = Builder::new();
        let p = Params::load(&mut b, &abi::ir_params_of(&descs));
        let _ = (p.get(SEQLEN_Q), p.get(LSE));
        let e = b.finish("t", abi::ir_params_of(&descs), LaunchBounds::default());
        let mut s = String::new();
        print::write_entry(&mut s, &e).unwrap();
        assert_eq!(s.matches("ld.param").count(), 2, "{s}");
        assert!(!s.contains("[tm]"), "{s}");
    }
}
