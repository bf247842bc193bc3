//! Kernel layer: kernel parameters, loaded once and looked up by their ABI name.

use crate::ptx::{AnyReg, B32, B64, Builder, F32, Param, Reg};

/// The kernel parameters, loaded once, looked up by their ABI name.
pub struct Params(Vec<(Param, AnyReg)>);

impl Params {
    /// Emits one `ld.param` per parameter.
    pub fn load(b: &mut Builder, params: &[Param]) -> Self {
        Params(params.iter().map(|p| (p.clone(), b.ld_param(p))).collect())
    }
    /// The register holding parameter `name` (a generator bug if absent).
    pub fn get(&self, name: &str) -> AnyReg {
        self.0
            .iter()
            .find(|(p, _)| p.name == name)
            .unwrap_or_else(|| panic!("no param {name}"))
            .1
    }
    /// A `u32` parameter.
    pub fn u32(&self, name: &str) -> Reg<B32> {
        match self.get(name) {
            AnyReg::B32(r) => r,
            r => panic!("generator bug: param {name} is {r:?}"),
        }
    }
    /// A `u64` parameter (pointers, batch strides).
    pub fn u64(&self, name: &str) -> Reg<B64> {
        match self.get(name) {
            AnyReg::B64(r) => r,
            r => panic!("generator bug: param {name} is {r:?}"),
        }
    }
    /// An `f32` parameter.
    pub fn f32(&self, name: &str) -> Reg<F32> {
        match self.get(name) {
            AnyReg::F32(r) => r,
            r => panic!("generator bug: param {name} is {r:?}"),
        }
    }
    /// Global byte address of `t[batch, row, head, 0]` for tensor `t` (q, k, v or o).
    pub fn tensor(
        &self,
        b: &mut Builder,
        t: &str,
        batch: Reg<B32>,
        row: Reg<B32>,
        head: Reg<B32>,
    ) -> Reg<B64> {
        let base = b.cvta_global(self.u64(t));
        let bs = self.u64(&format!("{t}_batch_stride"));
        let batch64 = b.cvt_u64_u32(batch);
        let off = b.mul_lo_u64(batch64, bs);
        let off = b.mad_wide_u32(head, self.u32(&format!("{t}_head_stride")), off);
        let off = b.mad_wide_u32(row, self.u32(&format!("{t}_row_stride")), off);
        let bytes = b.add_s64(off, off);
        b.add_s64(base, bytes)
    }
}

/// Global address of `stat[batch, head, row0]` of a `[batch, heads, seqlen_q]` f32 array.
pub fn row_stats_base(
    b: &mut Builder,
    p: &Params,
    name: &str,
    heads: Reg<B32>,
    batch: Reg<B32>,
    head: Reg<B32>,
    row0: Reg<B32>,
) -> Reg<B64> {
    let bh = b.mad_lo_u32(batch, heads, head);
    let r = b.mul_wide_u32(bh, p.u32("seqlen_q"));
    let row0 = b.cvt_u64_u32(row0);
    let r = b.add_s64(r, row0);
    let bytes = b.shl_b64(r, 2);
    let base = b.cvta_global(p.u64(name));
    b.add_s64(base, bytes)
}
