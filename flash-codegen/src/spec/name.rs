//! Spec layer: a kernel's name (`fa2_fwd_d128_bf16_causal_sm80`,
//! `fa2_bwd_d128_bf16_long_sm80`, `fa2_fwd_d256_f16_compact_sm80`) and its parser: `fa2`,
//! pass, `d` + head dim, dtype, then `causal` or `local`, `softcap`, and `long` or
//! `compact` (or `prefill`, `wide`) where they apply, then the arch.

use std::fmt;
use std::str::FromStr;

use super::{Arch, DType, HEAD_DIMS, KernelSpec, Mask, Pass, Scores, Tiling};

impl KernelSpec {
    /// The kernel's (and its entry point's) name.
    pub fn name(&self) -> String {
        format!(
            "fa2_{}_d{}_{}{}{}{}_{}",
            self.pass.name(),
            self.head_dim,
            self.dtype.name(),
            self.mask.suffix(),
            self.scores.suffix(),
            self.tiling.suffix(),
            self.arch.name()
        )
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Why a kernel name did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not a flash-ptx kernel name: {why} (expected e.g. `fa2_fwd_d128_bf16_causal_sm80`)"
)]
pub struct ParseSpecError {
    /// The text that failed to parse.
    pub name: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for KernelSpec {
    type Err = ParseSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ParseSpecError {
            name: s.to_string(),
            why: why.to_string(),
        };
        let parts: Vec<&str> = s.split('_').collect();
        if !(5..=8).contains(&parts.len()) {
            return Err(err("expected 5 to 8 parts separated by `_`"));
        }
        let n = parts.len();
        // between the dtype and the arch: `causal` or `local`, then `softcap`, then `long`,
        // `compact`, `prefill` or `wide`, each optional
        let middle = &parts[4..n - 1];
        let mask = Mask::ALL
            .into_iter()
            .find(|m| m.word().is_some() && middle.first().copied() == m.word())
            .unwrap_or(Mask::None);
        let at_scores = middle.get(usize::from(mask != Mask::None)).copied();
        let scores = Scores::ALL
            .into_iter()
            .find(|s| s.word().is_some() && at_scores == s.word())
            .unwrap_or(Scores::Plain);
        let tiling = match middle.last() {
            Some(&"long") => Tiling::Long,
            Some(&"compact") => Tiling::Compact,
            Some(&"prefill") => Tiling::Prefill,
            Some(&"wide") => Tiling::Wide,
            _ => Tiling::Standard,
        };
        let words = usize::from(mask != Mask::None)
            + usize::from(scores != Scores::Plain)
            + usize::from(tiling != Tiling::Standard);
        if middle.len() != words {
            return Err(err(
                "between the dtype and the arch only `causal` or `local`, then `softcap`, then `long`, `compact`, `prefill` or `wide`, may stand",
            ));
        }
        if parts[0] != "fa2" {
            return Err(err("it must start with `fa2_`"));
        }
        let pass = Pass::ALL
            .into_iter()
            .find(|p| p.name() == parts[1])
            .ok_or_else(|| err("unknown pass"))?;
        let head_dim = parts[2]
            .strip_prefix('d')
            .and_then(|d| d.parse::<u32>().ok())
            .filter(|d| HEAD_DIMS.contains(d))
            .ok_or_else(|| err("head dim must be d32, d64, d96, d128, d160, d192, d224 or d256"))?;
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.name() == parts[3])
            .ok_or_else(|| err("dtype must be f16 or bf16"))?;
        let arch = Arch::ALL
            .into_iter()
            .find(|a| a.name() == parts[n - 1])
            .ok_or_else(|| err("arch must be sm80"))?;
        let spec = KernelSpec {
            pass,
            head_dim,
            dtype,
            mask,
            scores,
            tiling,
            arch,
        };
        if !spec.pass.has_mask_for(mask) {
            return Err(err(match mask {
                Mask::Local => "this pass has no sliding-window (local) variant",
                _ => "this pass has no causal variant",
            }));
        }
        if !spec.pass.has_scores_for(scores, mask) {
            return Err(err("this pass has no softcap variant"));
        }
        if !spec.is_supported() {
            let name = match tiling {
                Tiling::Long => "long",
                Tiling::Compact => "compact",
                Tiling::Prefill => "prefill",
                Tiling::Wide => "wide",
                Tiling::Standard => "standard", // (every supported head dim has one)
            };
            return Err(err(&format!(
                "this pass and head dim have no `{name}` tiling"
            )));
        }
        if spec.name() != s {
            return Err(err("not in canonical form (e.g. `d64`, not `d064`)"));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in KernelSpec::all() {
            assert_eq!(s.name().parse::<KernelSpec>().unwrap(), s);
        }
        // 136 dense-attention kernels and 18 sliding-window forwards (local: 16 and the
        // d256 compact pair), 140 varlen ones (no long or compact rows; 12 wide ones), 100
        // split-KV forwards (standard, long, compact; prefill at d128) and 100 paged ones,
        // 48 combine steps (standard, long, prefill); 48 softcap forwards (every mask; no
        // compact rows: the softcap rows fit 99 KiB); the varlen forward's 16 local and
        // 48 softcap ones; the split-KV and paged forwards' 96 local and 288 softcap ones
        // (their standard, long and compact rows; no prefill row); the backward's 72 local
        // ones (bwd, its long row at d128, bwddq; varlen: bwdvarlen, its wide rows, bwddqvarlen);
        // the backward's 216 softcap ones (those, under each mask); ALiBi's 404 (the dense
        // forward's 36 with its compact d256 pair, bwd 36 with its d128 long row, bwddq 32;
        // varlen: fwdvarlen 32, bwdvarlen 44 with its wide rows, bwddqvarlen 32; fwdsplit
        // and fwdpaged 96 each, standard, long and compact: masks none and causal); the
        // backward's 254 compact ones within 99 KiB (bwd and bwdvarlen d96-d256, bwddq and
        // bwddqvarlen d224-d256, under every mask and modifier: 64 of them ALiBi's; not the
        // windowed bwdvarlen d128, whose standard row is the compact one); the grouped-query
        // split's 16 bwdkvsum (every head dim and dtype); bwd d64's 16 compact ones for
        // shared memory per SM (the A100's two CTAs per SM: every mask and modifier, 4 ALiBi)
        assert_eq!(KernelSpec::all().len(), 2016);
        let alibi: Vec<KernelSpec> = KernelSpec::all()
            .into_iter()
            .filter(|s| s.scores == Scores::Alibi)
            .collect();
        assert_eq!(alibi.len(), 472);
        assert!(alibi.iter().all(|s| s.mask != Mask::Local));
        let split = |s: &&KernelSpec| s.pass.tile_pass() == Pass::FwdSplit;
        assert_eq!(alibi.iter().filter(split).count(), 192);
        assert!(alibi.iter().all(|s| s.tiling != Tiling::Prefill));
        // (long: the d128 backward 4, the split kernels 64)
        assert_eq!(
            alibi.iter().filter(|s| s.tiling == Tiling::Long).count(),
            68
        );
        for n in [
            "fa2_bwd_d128_bf16_causal_alibi_long_sm80",
            "fa2_bwdvarlen_d64_f16_alibi_wide_sm80",
            "fa2_fwdpaged_d128_bf16_causal_alibi_long_sm80",
            "fa2_fwdsplit_d64_f16_alibi_compact_sm80",
            "fa2_bwddqvarlen_d128_bf16_causal_alibi_sm80",
            "fa2_fwd_d128_bf16_causal_alibi_sm80",
            "fa2_fwd_d256_f16_alibi_compact_sm80",
            "fa2_bwd_d96_bf16_causal_alibi_sm80",
            "fa2_bwddq_d128_f16_alibi_sm80",
        ] {
            assert!(alibi.iter().any(|s| s.name() == n), "{n}");
        }
        let softcap: Vec<KernelSpec> = KernelSpec::all()
            .into_iter()
            .filter(|s| s.scores == Scores::Softcap)
            .collect();
        assert_eq!(softcap.len(), 702);
        assert!(softcap.iter().all(|s| s.pass.has_mask()));
        assert!(softcap.iter().all(|s| s.tiling != Tiling::Prefill));
        assert_eq!(
            softcap.iter().filter(|s| s.pass == Pass::FwdVarlen).count(),
            48
        );
        for n in [
            "fa2_fwd_d128_bf16_softcap_sm80",
            "fa2_fwd_d128_bf16_causal_softcap_sm80",
            "fa2_fwd_d64_f16_local_softcap_sm80",
            "fa2_fwd_d256_bf16_local_softcap_sm80",
            "fa2_fwdvarlen_d128_f16_local_softcap_sm80",
            "fa2_fwdsplit_d128_bf16_local_softcap_sm80",
            "fa2_fwdpaged_d64_f16_causal_softcap_long_sm80",
            "fa2_fwdsplit_d256_bf16_softcap_compact_sm80",
            "fa2_bwd_d128_bf16_local_softcap_long_sm80",
            "fa2_bwddqvarlen_d64_f16_causal_softcap_sm80",
        ] {
            assert!(softcap.iter().any(|s| s.name() == n), "{n}");
        }
        let local: Vec<KernelSpec> = KernelSpec::all()
            .into_iter()
            .filter(|s| s.mask == Mask::Local && s.scores == Scores::Plain)
            .collect();
        assert_eq!(local.len(), 234);
        assert!(local.iter().all(|s| s.pass.has_mask()));
        for n in [
            "fa2_bwd_d128_bf16_local_long_sm80",
            "fa2_bwddq_d64_f16_local_sm80",
            "fa2_bwdvarlen_d96_bf16_local_wide_sm80",
            "fa2_bwd_d256_bf16_local_compact_sm80",
            "fa2_bwddqvarlen_d224_f16_local_compact_sm80",
        ] {
            assert!(local.iter().any(|s| s.name() == n), "{n}");
        }
        assert!(
            local
                .iter()
                .any(|s| s.name() == "fa2_fwd_d128_bf16_local_sm80")
        );
        let wide = KernelSpec::all()
            .into_iter()
            .filter(|s| s.tiling == Tiling::Wide);
        let wide: Vec<KernelSpec> = wide.collect();
        assert_eq!(wide.len(), 48); // (none, causal, local; plain and softcap; ALiBi: none, causal)
        for s in &wide {
            assert!(
                s.pass == Pass::BwdVarlen && [64, 96, 128].contains(&s.head_dim),
                "{s}"
            );
        }
        assert!(
            wide.iter()
                .any(|s| s.name() == "fa2_bwdvarlen_d64_bf16_causal_wide_sm80")
        );
        let split =
            |s: &KernelSpec| matches!(s.pass, Pass::FwdSplit | Pass::FwdCombine | Pass::FwdPaged);
        assert_eq!(KernelSpec::all().iter().filter(|s| split(s)).count(), 824); // (192 of them ALiBi)
        let named = |tiling: Tiling| -> Vec<String> {
            let all = KernelSpec::all().into_iter();
            // (the plain ones: each has its softcap twin, the backward's and the forward's
            // where its row differs)
            all.filter(|s| s.tiling == tiling && !split(s) && s.scores == Scores::Plain)
                .map(|s| s.name())
                .collect()
        };
        let compact = named(Tiling::Compact);
        // (the backward's: bwd 42 (d64's 6 for shared memory per SM), bwddq 12, bwdvarlen
        // 34, bwddqvarlen 12)
        assert_eq!(
            compact.iter().filter(|n| n.starts_with("fa2_bwd")).count(),
            100
        );
        assert_eq!(
            compact
                .iter()
                .filter(|n| n.starts_with("fa2_fwd"))
                .collect::<Vec<_>>(),
            [
                "fa2_fwd_d256_f16_compact_sm80",
                "fa2_fwd_d256_f16_causal_compact_sm80",
                "fa2_fwd_d256_f16_local_compact_sm80",
                "fa2_fwd_d256_bf16_compact_sm80",
                "fa2_fwd_d256_bf16_causal_compact_sm80",
                "fa2_fwd_d256_bf16_local_compact_sm80",
            ]
        );
        assert_eq!(
            named(Tiling::Long),
            [
                "fa2_bwd_d128_f16_long_sm80",
                "fa2_bwd_d128_f16_causal_long_sm80",
                "fa2_bwd_d128_f16_local_long_sm80",
                "fa2_bwd_d128_bf16_long_sm80",
                "fa2_bwd_d128_bf16_causal_long_sm80",
                "fa2_bwd_d128_bf16_local_long_sm80",
            ]
        );
    }

    #[test]
    fn bad_names_are_refused() {
        for n in [
            "",
            "fa2_fwd_d100_bf16_sm80",
            "fa2_fwd_d128_fp8_sm80",
            "fa2_fwd_d128_bf16_masked_sm80",
            "fa3_fwd_d128_bf16_sm80",
            "fa2_fwd_d064_bf16_sm80",
            "fa2_fwd_d+64_bf16_sm80",
            "fa2_bwdpre_d64_f16_causal_sm80",
            "fa2_fwd_d128_bf16_long_sm80",
            "fa2_bwd_d64_bf16_long_sm80",
            "fa2_bwd_d128_bf16_long_causal_sm80",
            "fa2_bwd_d128_bf16_long_long_sm80",
            "fa2_bwd_d128_bf16_causal_causal_sm80",
            "fa2_bwdpre_d128_bf16_softcap_sm80",
            "fa2_bwdpostvarlen_d64_f16_softcap_sm80",
            "fa2_fwdcombine_d128_bf16_softcap_sm80",
            "fa2_fwdsplit_d128_bf16_local_prefill_sm80",
            "fa2_fwdsplit_d128_bf16_softcap_prefill_sm80",
            "fa2_fwd_d128_bf16_softcap_causal_sm80",
            "fa2_fwd_d128_bf16_softcap_softcap_sm80",
            "fa2_fwd_d128_bf16_causal_compact_softcap_sm80",
            "fa2_fwd_d256_bf16_softcap_compact_sm80",
        ] {
            assert!(n.parse::<KernelSpec>().is_err(), "{n}");
        }
    }
}
