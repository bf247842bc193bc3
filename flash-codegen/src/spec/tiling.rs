//! Spec layer: the tilings of a kernel (standard, long, compact, prefill, wide) and the
//! rules that choose between them: by sequence length ([`KernelSpec::for_seqlen`]), by the
//! GPU's shared memory per block ([`KernelSpec::for_smem`]) and by its compute capability
//! ([`KernelSpec::for_compute_capability`]).

use serde::{Deserialize, Serialize};

use super::tiles::sm80;
use super::{Arch, KernelSpec};

/// Shared memory per SM of the GPUs the tile rows were tuned on (H100, H200: 228 KiB):
/// the occupancy [`KernelSpec::for_smem_per_sm`] keeps.
pub const TUNED_SMEM_PER_SM: u64 = 228 * 1024;

/// Which row of the tile table a kernel is built from.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Tiling {
    /// The (pass, head dim)'s row: every problem can run on it.
    #[default]
    Standard,
    /// The row for long sequences, where the pass has one (the atomic-mode backward at
    /// d128: 128 keys per CTA, from 8192 query rows on; [`KernelSpec::long_from`]). Its
    /// kernel computes exactly what the standard one does, faster on those problems.
    Long,
    /// The row for GPUs with less shared memory per block than the standard row needs
    /// (RTX 30/40, L4, L40: 99 KiB), where the pass has one ([`KernelSpec::for_smem`]):
    /// the d256 forward (its standard row takes 104.5 KiB; same grid), the split-KV
    /// forward, the backward main pass from d96 and the dQ pass at d224-d256, dense and
    /// varlen (smaller blocks: their own grid). Same result.
    Compact,
    /// The split-KV forward's row for many packed query rows (a chunked prefill against a
    /// KV cache), where the head dim has one: the dense forward's tile (d128: 128 rows,
    /// 32 keys a block), from [`KernelSpec::prefill_from`] packed rows on; the combine
    /// step's row for few splits (a row per warp, up to 8 splits;
    /// [`KernelSpec::for_splits`]). Same result.
    Prefill,
    /// The row for GPUs of compute capability 9.0 and newer (H100, H200), where the pass
    /// has one: the varlen backward at d64, d96 and d128 on the dense backward's tiles,
    /// which ptxas fits in 255 registers for sm_90 but not for sm_80-sm_89 once the
    /// sequence's lengths take registers (there the standard row, with smaller tiles,
    /// runs; [`KernelSpec::for_compute_capability`]). Same result, faster there.
    Wide,
}

impl Tiling {
    /// The tiling's part of a kernel name (`""`, `"_long"`, `"_compact"`, `"_prefill"`,
    /// `"_wide"`).
    pub fn suffix(self) -> &'static str {
        match self {
            Tiling::Standard => "",
            Tiling::Long => "_long",
            Tiling::Compact => "_compact",
            Tiling::Prefill => "_prefill",
            Tiling::Wide => "_wide",
        }
    }
}

impl KernelSpec {
    /// This spec in `tiling` (supported or not: see [`KernelSpec::is_supported`]).
    pub fn with_tiling(self, tiling: Tiling) -> KernelSpec {
        KernelSpec { tiling, ..self }
    }

    /// Whether this spec's tiling has a row for its pass and head dim.
    pub(super) fn has_tiling_row(&self) -> bool {
        match self.arch {
            Arch::Sm80 => sm80::tiling_row(self).is_some(),
        }
    }

    /// The fewest query rows of the long row of this spec's pass and head dim.
    fn long_threshold(&self) -> Option<u32> {
        match self.arch {
            Arch::Sm80 => sm80::long_row(self).map(|(from, _)| from),
        }
    }

    /// This spec in each tiling its pass and head dim have: [`Tiling::Standard`], then
    /// [`Tiling::Long`], [`Tiling::Compact`], [`Tiling::Prefill`] and [`Tiling::Wide`]
    /// where there are such rows.
    pub fn tilings(self) -> impl Iterator<Item = KernelSpec> {
        [
            Tiling::Standard,
            Tiling::Long,
            Tiling::Compact,
            Tiling::Prefill,
            Tiling::Wide,
        ]
        .map(|tiling| self.with_tiling(tiling))
        .into_iter()
        .filter(KernelSpec::is_supported)
    }

    /// This spec with the tiling a GPU allowing `smem_optin` bytes of dynamic shared
    /// memory per block (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`) runs:
    /// unchanged where it fits; else (a long or wide row) the standard row where that
    /// fits; else the compact row where the pass and head dim have one; otherwise
    /// unchanged (a kernel that does not fit then fails to load with an error that says
    /// so).
    pub fn for_smem(self, smem_optin: u64) -> KernelSpec {
        let fits = |s: &KernelSpec| s.is_supported() && u64::from(s.smem_bytes()) <= smem_optin;
        let standard = self.with_tiling(Tiling::Standard);
        let compact = self.with_tiling(Tiling::Compact);
        if self.tiling == Tiling::Compact || fits(&self) {
            self
        } else if fits(&standard) {
            standard
        } else if compact.is_supported() {
            compact
        } else {
            self
        }
    }

    /// The warps of this kernel (on its table row) resident per SM on a GPU with
    /// `smem_per_sm` bytes of shared memory per SM: [`KernelPlan::ctas_per_sm`] times its
    /// warps.
    ///
    /// [`KernelPlan::ctas_per_sm`]: super::KernelPlan::ctas_per_sm
    pub fn resident_warps(&self, smem_per_sm: u64) -> u32 {
        let plan = self.plan(&super::Tuning::NONE);
        plan.ctas_per_sm(smem_per_sm) * plan.tiles.warps()
    }

    /// This spec (as [`KernelSpec::for_smem`] left it) on a GPU with `smem_per_sm` bytes
    /// of shared memory per SM: its compact row where this row keeps fewer warps resident
    /// there than on the H100/H200 the rows were tuned on ([`TUNED_SMEM_PER_SM`]) and the
    /// compact row (fitting `smem_optin`) keeps more; otherwise unchanged (a row that
    /// keeps its occupancy keeps its larger blocks, which move fewer bytes per FLOP). An
    /// A100 (164 KiB per SM) holds one CTA of the d64-d128 backward's standard rows
    /// (97-113 KiB, 4 warps) where an H100 holds two, and two of their compact rows. 0
    /// (unknown): unchanged.
    pub fn for_smem_per_sm(self, smem_per_sm: u64, smem_optin: u64) -> KernelSpec {
        let compact = self.with_tiling(Tiling::Compact);
        let here = self.resident_warps(smem_per_sm);
        let better = smem_per_sm > 0
            && self.tiling != Tiling::Compact
            && here < self.resident_warps(TUNED_SMEM_PER_SM)
            && compact.is_supported()
            && u64::from(compact.smem_bytes()) <= smem_optin
            && compact.resident_warps(smem_per_sm) > here;
        if better { compact } else { self }
    }

    /// This spec with the tiling a GPU of compute capability `(major, minor)` runs: the
    /// wide row from 9.0 on where the pass and head dim have one (the varlen backward at
    /// d64-d128), otherwise unchanged. The wide kernels' manifest entries say so in
    /// `min_compute_capability`.
    pub fn for_compute_capability(self, (major, minor): (u32, u32)) -> KernelSpec {
        let wide = self.with_tiling(Tiling::Wide);
        let at_least = |(a, b): (u32, u32)| (major, minor) >= (a, b);
        match self.tiling == Tiling::Standard
            && wide.is_supported()
            && at_least(wide.min_compute_capability())
        {
            true => wide,
            false => self,
        }
    }

    /// The compute capability the GPU must have for this kernel: its arch's (8.0), or
    /// 9.0 for [`Tiling::Wide`] (the sm_80-sm_89 register allocation spills it).
    pub fn min_compute_capability(&self) -> (u32, u32) {
        match self.tiling {
            Tiling::Wide => (9, 0),
            _ => self.arch.min_compute_capability(),
        }
    }

    /// The fewest query rows (`seqlen_q`) from which this spec's pass and head dim run on
    /// [`Tiling::Long`], in atomic mode (a null `dq_accum` keeps the standard tiling);
    /// `None` when they have no long row.
    pub fn long_from(&self) -> Option<u32> {
        self.long_threshold()
    }

    /// The fewest packed rows (`seqlen_q * heads_per_kv`) from which a split-KV forward
    /// may run on [`Tiling::Prefill`]; `None` where its head dim has no such row, and for
    /// other passes.
    pub fn prefill_from(&self) -> Option<u32> {
        match (self.pass.tile_pass(), self.arch) {
            (super::Pass::FwdSplit, Arch::Sm80) => sm80::prefill_row(self).map(|(n, _)| n),
            _ => None,
        }
    }

    /// A split-KV forward with `rows` packed rows (`seqlen_q * heads_per_kv`) on the
    /// tiling the runtime runs it on: the key-split standard row up to 16 rows (a decode
    /// step), the long row (64-row tiles) from [`KernelSpec::long_from`] on, the prefill
    /// row from [`KernelSpec::prefill_from`] on where the head dim has one. Other passes
    /// are unchanged.
    pub fn for_packed_rows(self, rows: usize) -> KernelSpec {
        let from = |f: Option<u32>| f.is_some_and(|from| rows >= from as usize);
        match self.pass.tile_pass() == super::Pass::FwdSplit {
            true if from(self.prefill_from()) => self.with_tiling(Tiling::Prefill),
            true if from(self.long_from()) => self.with_tiling(Tiling::Long),
            _ => self,
        }
    }

    /// A combine step of `splits` splits on the tiling the runtime runs it on: the
    /// prefill row (a row per warp) up to its most splits (8), the long row (8 warps a
    /// row) from [`KernelSpec::long_from`] splits on, else the standard one (4 warps a
    /// row). Other passes are unchanged.
    pub fn for_splits(self, splits: u32) -> KernelSpec {
        let rows_max = match self.arch {
            Arch::Sm80 => sm80::prefill_row(&self).map(|(n, _)| n),
        };
        match self.pass == super::Pass::FwdCombine {
            true if rows_max.is_some_and(|n| splits <= n) => self.with_tiling(Tiling::Prefill),
            true if self.long_from().is_some_and(|from| splits >= from) => {
                self.with_tiling(Tiling::Long)
            }
            _ => self,
        }
    }

    /// This spec with the tiling a problem of `seqlen_q` query rows runs on: its long
    /// row from [`KernelSpec::long_from`] rows on when `atomic_dq` (the backward adds dQ
    /// with atomics), else the standard one.
    pub fn for_seqlen(self, seqlen_q: usize, atomic_dq: bool) -> KernelSpec {
        let long = atomic_dq
            && self
                .long_from()
                .is_some_and(|from| seqlen_q >= from as usize);
        self.with_tiling(if long { Tiling::Long } else { Tiling::Standard })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The long row is chosen from its threshold on, in atomic mode only, and only where
    /// it exists.
    #[test]
    fn long_tiling_is_chosen_by_length_and_mode() {
        let bwd: KernelSpec = "fa2_bwd_d128_bf16_causal_sm80".parse().unwrap();
        let from = bwd.long_from().unwrap() as usize;
        assert_eq!(bwd.for_seqlen(from - 1, true).tiling, Tiling::Standard);
        assert_eq!(bwd.for_seqlen(from, true).tiling, Tiling::Long);
        assert_eq!(bwd.for_seqlen(from, false).tiling, Tiling::Standard);
        let long = bwd.for_seqlen(from, true);
        assert_eq!(long.name(), "fa2_bwd_d128_bf16_causal_long_sm80");
        assert_eq!(long.tiles().block_n(), 128);
        assert_eq!(bwd.tiles().block_n(), 64);
        for other in [
            "fa2_bwd_d64_bf16_sm80",
            "fa2_fwd_d128_bf16_sm80",
            "fa2_bwddq_d128_f16_sm80",
        ] {
            let s: KernelSpec = other.parse().unwrap();
            assert_eq!(s.long_from(), None, "{other}");
            assert_eq!(s.for_seqlen(1 << 20, true), s, "{other}");
        }
    }

    /// The compact row stands in for the standard one on the same grid and block, and
    /// only where the standard row does not fit.
    #[test]
    fn compact_tiling_is_chosen_by_shared_memory() {
        let fwd: KernelSpec = "fa2_fwd_d256_bf16_causal_sm80".parse().unwrap();
        let compact = fwd.for_smem(99 * 1024);
        assert_eq!(compact.tiling, Tiling::Compact);
        assert_eq!(compact.name(), "fa2_fwd_d256_bf16_causal_compact_sm80");
        assert_eq!(fwd.for_smem(u64::from(fwd.smem_bytes())), fwd);
        let (t, c) = (fwd.tiles(), compact.tiles());
        assert_eq!((t.block_m(), t.warps()), (c.block_m(), c.warps()));
        assert!(compact.smem_bytes() < fwd.smem_bytes());
        // the backward's compact rows: from the standard and the long row, dense and varlen
        for (name, compact) in [
            ("fa2_bwd_d256_bf16_sm80", "fa2_bwd_d256_bf16_compact_sm80"),
            (
                "fa2_bwd_d128_f16_causal_long_sm80",
                "fa2_bwd_d128_f16_causal_compact_sm80",
            ),
            (
                "fa2_bwdvarlen_d128_bf16_wide_sm80",
                "fa2_bwdvarlen_d128_bf16_compact_sm80",
            ),
            (
                "fa2_bwddq_d256_bf16_local_sm80",
                "fa2_bwddq_d256_bf16_local_compact_sm80",
            ),
        ] {
            let s: KernelSpec = name.parse().unwrap();
            assert_eq!(s.for_smem(99 * 1024).name(), compact);
            assert_eq!(s.for_smem(u64::from(s.smem_bytes())), s);
        }
        // no compact row where the standard one fits: a kernel stays as it is
        let bwd: KernelSpec = "fa2_bwd_d64_bf16_sm80".parse().unwrap();
        assert_eq!(bwd.for_smem(99 * 1024), bwd);
        assert!(
            "fa2_bwd_d32_bf16_compact_sm80"
                .parse::<KernelSpec>()
                .is_err()
        );
        assert!(
            "fa2_fwd_d128_bf16_compact_sm80"
                .parse::<KernelSpec>()
                .is_err()
        );
    }

    /// By shared memory per SM: the A100's 164 KiB moves the d64-d128 backward to its
    /// compact rows (two CTAs of 4 warps instead of one), and nothing else; the H100's
    /// 228 KiB and an RTX's 100 KiB keep every row (a tie keeps the larger blocks).
    #[test]
    fn compact_tiling_is_chosen_by_shared_memory_per_sm() {
        let (a100, a100_block) = (164 * 1024, 163 * 1024);
        let spec = |n: &str| n.parse::<KernelSpec>().unwrap();
        let tiling = |n: &str, per_sm: u64, block: u64| {
            spec(n)
                .for_smem(block)
                .for_smem_per_sm(per_sm, block)
                .tiling
        };
        for d in [64, 96, 128] {
            for name in [
                format!("fa2_bwd_d{d}_bf16_sm80"),
                format!("fa2_bwd_d{d}_f16_causal_softcap_sm80"),
            ] {
                assert_eq!(tiling(&name, a100, a100_block), Tiling::Compact, "{name}");
                assert_eq!(spec(&name).resident_warps(a100), 4, "{name}");
                let c = spec(&name).with_tiling(Tiling::Compact);
                assert_eq!(c.resident_warps(a100), 8, "{name}");
                assert_eq!(
                    tiling(&name, 228 * 1024, 227 * 1024),
                    Tiling::Standard,
                    "{name}"
                );
            }
        }
        // d64 on an RTX (100 KiB per SM): one CTA of either row
        assert_eq!(
            tiling("fa2_bwd_d64_bf16_sm80", 100 * 1024, 99 * 1024),
            Tiling::Standard
        );
        // 8 warps in one CTA already: the long row stays
        assert_eq!(
            tiling("fa2_bwd_d128_bf16_long_sm80", a100, a100_block),
            Tiling::Long
        );
        // the same warps either way, or the compact row as the only one that fits
        // an H100's d224: the compact row would keep 6 warps to the standard's 4, but 4 is
        // what the standard row was tuned to
        assert_eq!(
            tiling("fa2_bwd_d224_bf16_sm80", 228 * 1024, 227 * 1024),
            Tiling::Standard
        );
        for (name, want) in [
            ("fa2_bwd_d160_bf16_sm80", Tiling::Standard),
            ("fa2_bwd_d192_bf16_causal_sm80", Tiling::Standard),
            ("fa2_bwd_d256_bf16_sm80", Tiling::Compact),
            ("fa2_bwd_d32_bf16_sm80", Tiling::Standard),
            ("fa2_fwd_d256_bf16_sm80", Tiling::Standard),
            ("fa2_fwd_d128_bf16_sm80", Tiling::Standard),
        ] {
            assert_eq!(tiling(name, a100, a100_block), want, "{name}");
        }
        // unknown per-SM memory: unchanged
        let s = spec("fa2_bwd_d64_bf16_sm80");
        assert_eq!(s.for_smem_per_sm(0, a100_block), s);
    }
}
