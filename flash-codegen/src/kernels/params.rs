//! Kernel layer: kernel parameters, loaded once and read through their ABI handles
//! ([`crate::abi::args`]: `p.get(HEAD_DIM)`, `p.tensor(b, &Q, ..)`), and the CTA's
//! sequence: its lengths ([`Params::seqlen_q`]) and rows, from the parameters of a dense
//! pass or, for a varlen pass, from its offsets ([`Packed`]).

use super::varlen::{Packed, Side};
use crate::abi::{self, Arg, ArgKind, DK, DV, K, ParamDesc, TensorArgs, V};
use crate::ptx::{AnyReg, B32, B64, Builder, Param, ParamTy, Reg};
use crate::spec::Pass;
use crate::tile::frag::AccumGrid;

/// The kernel parameters, loaded once, read through their handles.
pub struct Params {
    /// What the entry declares, in ABI order.
    entry: Vec<Param<ParamTy>>,
    /// Each scalar parameter's name and register, in ABI order.
    regs: Vec<(&'static str, AnyReg)>,
    /// Whose parameters they are, for messages (`the fwd pass`).
    owner: String,
    /// A varlen pass's sequence (`None`: a dense pass, whose lengths are parameters).
    packed: Option<Packed>,
}

impl Params {
    /// The parameters of `pass` ([`abi::params`]); a varlen pass's also answer with its
    /// CTA's sequence ([`Packed`]).
    pub fn load(b: &mut Builder, pass: Pass) -> Self {
        let owner = format!("the {} pass", pass.name());
        Self::of_pass(b, pass, &owner, abi::params(pass))
    }

    /// [`Params::load`] for `spec`'s kernel: its pass's parameters and its mask's (the
    /// sliding window's bounds, [`abi::params_of`]).
    pub fn load_spec(b: &mut Builder, spec: &crate::spec::KernelSpec) -> Self {
        let owner = format!("the {} kernel", spec.name());
        Self::of_pass(b, spec.pass, &owner, &abi::params_of(spec))
    }

    /// [`Params::of`] for a kernel of `pass` (a varlen pass also answers with its CTA's
    /// sequence).
    fn of_pass(b: &mut Builder, pass: Pass, owner: &str, descs: &[ParamDesc]) -> Self {
        let mut p = Self::of(b, owner, descs);
        if pass.is_varlen() {
            p.packed = Some(Packed::default());
        }
        p
    }

    /// The parameters `descs` of an entry (`owner` names it in messages): one
    /// `ld.param` per scalar, in order. A by-value struct (a tensor map) is not loaded:
    /// it is read through its address ([`Builder::param_addr`]).
    pub fn of(b: &mut Builder, owner: &str, descs: &[ParamDesc]) -> Self {
        let entry = abi::ir_params_of(descs);
        let regs = descs
            .iter()
            .zip(&entry)
            .filter(|(d, _)| d.ty.scalar().is_some())
            .map(|(d, p)| (d.name, b.ld_param(p)))
            .collect();
        Params {
            entry,
            regs,
            owner: owner.to_string(),
            packed: None,
        }
    }

    /// A varlen pass whose CTA order remaps the sequence: it is `seq`, not `%ctaid.z`.
    pub fn set_sequence(&mut self, seq: Reg<B32>) {
        if let Some(pk) = &mut self.packed {
            pk.seq = Some(seq);
        }
    }

    /// The varlen pass's sequence, if this is one.
    pub fn packed(&self) -> Option<&Packed> {
        self.packed.as_ref()
    }

    /// The CTA's query count: `seqlen_q`, or its sequence's (read here).
    pub fn seqlen_q(&self, b: &mut Builder) -> Reg<B32> {
        match &self.packed {
            Some(_) => Packed::len(b, self, Side::Queries),
            None => self.get(abi::SEQLEN_Q),
        }
    }

    /// The CTA's key count: `seqlen_k`, or its sequence's (read here).
    pub fn seqlen_k(&self, b: &mut Builder) -> Reg<B32> {
        match &self.packed {
            Some(_) => Packed::len(b, self, Side::Keys),
            None => self.get(abi::SEQLEN_K),
        }
    }

    /// The dQ accumulator's tile grid: over `seqlen_q` rows per (batch, head), or the
    /// varlen layout's rows per head ([`crate::abi::varlen`]).
    pub fn accum_grid(&self, b: &mut Builder, head_dim: Reg<B32>) -> AccumGrid {
        match &self.packed {
            Some(_) => {
                let rows = Packed::accum_rows(b, self);
                AccumGrid::new(b, rows, head_dim)
            }
            None => AccumGrid::new(b, self.get(abi::SEQLEN_Q), head_dim),
        }
    }

    /// The accumulator's (batch, head) index (`batch * heads + head`; varlen: `head`)
    /// and the accumulator row of the sequence's query row `row` (varlen: past the
    /// sequence's first accumulator row).
    pub fn accum_at(
        &self,
        b: &mut Builder,
        (batch, heads, head): (Reg<B32>, Reg<B32>, Reg<B32>),
        row: Reg<B32>,
    ) -> (Reg<B32>, Reg<B32>) {
        match &self.packed {
            Some(_) => {
                let r0 = Packed::accum_row0(b, self);
                (head, b.add_u32(r0, row))
            }
            None => (b.mad_lo_u32(batch, heads, head), row),
        }
    }

    /// What the entry declares, for [`Builder::finish`].
    pub fn entry(&self) -> Vec<Param<ParamTy>> {
        self.entry.clone()
    }

    /// The register holding parameter `a` (a generator bug if the entry lacks it).
    pub fn get<K: ArgKind>(&self, a: Arg<K>) -> Reg<K> {
        let r = self
            .regs
            .iter()
            .find(|(n, _)| *n == a.name())
            .unwrap_or_else(|| {
                panic!(
                    "generator bug: {} has no parameter {}",
                    self.owner,
                    a.name()
                )
            })
            .1;
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

    /// Global byte address of `t[batch, row, head, 0]` for tensor `t` (2-byte elements);
    /// varlen: of row `row` of the CTA's sequence, `t[first + row, head, 0]` (`batch` is
    /// the sequence).
    pub fn tensor(
        &self,
        b: &mut Builder,
        t: &TensorArgs,
        batch: Reg<B32>,
        row: Reg<B32>,
        head: Reg<B32>,
    ) -> Reg<B64> {
        if self.packed.is_some() {
            let side = match [K, V, DK, DV].contains(t) {
                true => Side::Keys,
                false => Side::Queries,
            };
            let first = Packed::first(b, self, side);
            let base = b.cvta_global(self.get(t.ptr));
            let row = b.add_u32(first, row);
            let off = b.mul_wide_u32(head, self.get(t.head_stride));
            let off = b.mad_wide_u32(row, self.get(t.row_stride), off);
            let bytes = b.add_s64(off, off);
            return b.add_s64(base, bytes);
        }
        let base = b.cvta_global(self.get(t.ptr));
        let bs = self.get(t.batch_stride);
        let batch64 = b.cvt_u64_u32(batch);
        let off = b.mul_lo_u64(batch64, bs);
        let off = b.mad_wide_u32(head, self.get(t.head_stride), off);
        let off = b.mad_wide_u32(row, self.get(t.row_stride), off);
        let bytes = b.add_s64(off, off);
        b.add_s64(base, bytes)
    }
}

/// Global address of `stat[batch, head, row0]` of a `[batch, heads, seqlen_q]` f32 array
/// whose pointer is parameter `stat` ([`abi::LSE`], [`abi::DVEC`]); varlen: of
/// `stat[head, first + row0]` in `[heads, total_q]`.
pub fn row_stats_base(
    b: &mut Builder,
    p: &Params,
    stat: Arg<B64>,
    heads: Reg<B32>,
    batch: Reg<B32>,
    head: Reg<B32>,
    row0: Reg<B32>,
) -> Reg<B64> {
    if p.packed().is_some() {
        let r = Packed::stats_index(b, p, head, row0);
        let bytes = b.shl_b64(r, 2);
        let base = b.cvta_global(p.get(stat));
        return b.add_s64(base, bytes);
    }
    let bh = b.mad_lo_u32(batch, heads, head);
    let r = b.mul_wide_u32(bh, p.get(abi::SEQLEN_Q));
    let row0 = b.cvt_u64_u32(row0);
    let r = b.add_s64(r, row0);
    let bytes = b.shl_b64(r, 2);
    let base = b.cvta_global(p.get(stat));
    b.add_s64(base, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{DQ_ACCUM, DVEC, LSE, SEQLEN_K, SEQLEN_Q};
    use crate::ptx::{LaunchBounds, print};

    /// The loads come first, in ABI order, one per parameter.
    #[test]
    fn loads_follow_the_abi_order() {
        let mut b = Builder::new();
        let p = Params::load(&mut b, Pass::Fwd);
        let e = b.finish("t", p.entry(), LaunchBounds::default());
        let mut s = String::new();
        print::write_entry(&mut s, &e).unwrap();
        let loads: Vec<&str> = s.lines().filter(|l| l.contains("ld.param")).collect();
        assert_eq!(loads.len(), abi::FWD_PARAMS.len());
        for (l, d) in loads.iter().zip(&abi::FWD_PARAMS) {
            assert!(l.contains(&format!("[{}]", d.name)), "{l} vs {}", d.name);
        }
        let reg = |pass, a: Arg<B64>| Params::load(&mut Builder::new(), pass).get(a).id();
        assert_eq!(reg(Pass::BwdPre, DVEC), reg(Pass::BwdPre, DQ_ACCUM) - 1);
    }

    /// Every handle a pass lists reads back with its class.
    #[test]
    fn every_pass_reads_its_handles() {
        for pass in Pass::ALL {
            let mut b = Builder::new();
            let p = Params::load(&mut b, pass);
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
        Params::load(&mut Builder::new(), Pass::BwdPost).get(SEQLEN_K);
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
        let p = Params::of(&mut b, "a test entry", &descs);
        let _ = (p.get(SEQLEN_Q), p.get(LSE));
        let e = b.finish("t", p.entry(), LaunchBounds::default());
        let mut s = String::new();
        print::write_entry(&mut s, &e).unwrap();
        assert_eq!(s.matches("ld.param").count(), 2, "{s}");
        assert!(!s.contains("[tm]"), "{s}");
        assert!(s.contains(".param .align 64 .b8 tm[128]"), "{s}");
    }
}
