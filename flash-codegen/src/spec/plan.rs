//! Spec layer: a kernel's plan: its spec, the tile row it is built on (the table's, or a
//! tuning row) and its shared-memory layout, resolved once and handed to the kernels.

use super::KernelSpec;
use super::smem::SmemLayout;
use super::tiles::{TileConfig, Tuning, check};
use super::tiling::TUNED_SMEM_PER_SM;

/// Everything the kernel builders read about one variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPlan {
    /// The variant.
    pub spec: KernelSpec,
    /// The tile row it is built on.
    pub tiles: TileConfig,
    /// Where its shared-memory regions sit.
    pub smem: SmemLayout,
}

impl KernelSpec {
    /// The plan of this spec, built on its table row or on `tuning`'s replacement of it.
    /// Panics for an unsupported spec, or a row that breaks its layout's rules (table
    /// rows are checked by a test, tuning rows when made).
    pub fn plan(&self, tuning: &Tuning) -> KernelPlan {
        assert!(self.is_supported(), "unsupported spec {self:?}");
        let tiles = self.tiles_tuned(tuning);
        if let Err(why) = check(self.pass, self.head_dim, &tiles) {
            panic!("generator bug: {self} on {tiles:?}: {why}");
        }
        KernelPlan {
            spec: *self,
            smem: SmemLayout::new(self, &tiles),
            tiles,
        }
    }

    /// Dynamic shared memory bytes of the kernel on its table row.
    pub fn smem_bytes(&self) -> u32 {
        SmemLayout::new(self, &self.tiles()).bytes
    }
}

impl KernelPlan {
    /// The CTAs per SM the kernel is planned for: [`KernelPlan::ctas_per_sm`] on the
    /// H100/H200 the rows were tuned on ([`TUNED_SMEM_PER_SM`]). Emitted as
    /// `.minnctapersm`, so that ptxas does not trade spills for an occupancy the plan does
    /// not count on.
    #[must_use]
    pub fn ctas_per_sm_hint(&self) -> u32 {
        self.ctas_per_sm(TUNED_SMEM_PER_SM)
    }

    /// The CTAs of this kernel resident per SM on a GPU with `smem_per_sm` bytes of
    /// shared memory per SM: as many as shared memory allows (1 KiB of it reserved per
    /// CTA, as on sm_80-sm_90) and a 64K register file allows at the full 255 registers
    /// per thread, at least 1.
    #[must_use]
    pub fn ctas_per_sm(&self, smem_per_sm: u64) -> u32 {
        let by_smem = smem_per_sm / (u64::from(self.smem.bytes) + 1024);
        let by_regs = u64::from(65536 / (self.tiles.threads() * 256));
        by_smem.min(by_regs).max(1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Pass, Tiling};

    /// The rows sized for two CTAs per SM on H100/H200 (228 KiB of shared memory per SM,
    /// 1 KiB reserved per CTA; 255 registers x 128 threads x 2 fit the 64K register
    /// file): the d128 and d64 backward, the d256 forward (exchange layout, 104.5 KiB). A
    /// few more bytes would halve their occupancy silently.
    #[test]
    fn two_cta_rows_keep_two_ctas_per_sm() {
        let rows = [(Pass::Bwd, 128), (Pass::Bwd, 64), (Pass::Fwd, 256)];
        for s in KernelSpec::all() {
            if rows.contains(&(s.pass, s.head_dim)) && s.tiling == Tiling::Standard {
                let plan = s.plan(&Tuning::NONE);
                assert!(2 * (plan.smem.bytes + 1024) <= 228 * 1024, "{s}");
                assert!(2 * plan.tiles.threads() * 255 <= 65536, "{s}");
                assert_eq!(plan.ctas_per_sm_hint(), 2, "{s}");
            }
        }
    }

    /// Each layout's regions follow one another without overlap, and the total is the
    /// sum of the shared-memory formula of each pass (Q + 2 stages K/V (+ P and row
    /// statistics); K, V + stages of Q, dO, LSE, D + two dS^T-sized tiles; Q, dO +
    /// stages of K/V).
    #[test]
    fn regions_are_disjoint_and_add_up() {
        for s in KernelSpec::all() {
            let (t, smem) = (*s.tiles().sm80(), s.plan(&Tuning::NONE).smem);
            let row = s.smem_head_dim() * 2;
            let pad = |x: u32| x.div_ceil(64) * 64 * 2;
            let want = match s.pass.tile_pass() {
                Pass::Fwd if t.layout.exchange() => {
                    t.block_m * row
                        + 2 * t.stages * t.block_n * row
                        + t.block_m * pad(t.block_n)
                        + t.warps * 32 * 4
                }
                Pass::Fwd | Pass::FwdSplit => t.block_m * row + 2 * t.stages * t.block_n * row,
                Pass::Bwd => {
                    2 * t.block_n * row
                        + 2 * t.stages * t.block_m * (row + 4)
                        + 2 * t.block_n * pad(t.block_m)
                }
                Pass::BwdDq => 2 * t.block_m * row + 2 * t.stages * t.block_n * row,
                Pass::FwdCombine => t.warps * s.head_dim * 4,
                Pass::BwdPre | Pass::BwdPost | Pass::BwdKvSum => 0,
                p => unreachable!("{p:?}"),
            };
            assert_eq!(smem.bytes, want, "{s}");
            let mut at = 0;
            let stream = smem.stream.map(|r| (r.base, r.base + r.bytes()));
            let tiles = smem.fixed.iter().chain(&smem.exchange);
            let mut spans: Vec<(u32, u32)> = tiles.map(|r| (r.base, r.end())).collect();
            spans.extend(stream);
            spans.sort_unstable();
            for (from, to) in spans {
                assert!(from >= at && to > from, "{s}: overlap at {from}");
                at = to;
            }
        }
    }
}
