//! Spec layer: the sm_80 path's tile rows (mma.sync warps, cp.async stages), their
//! table, and the rules a row must satisfy.

use serde::{Deserialize, Serialize};

use crate::spec::{KernelSpec, Mask, Pass, Scores, Tiling};
use Sm80Layout::{Exchange, ExchangeLatePrefetch, KeySplit, Resident, Streamed};
use table::{
    BWD_COMPACT_TILES, BWD_DQ_COMPACT_TILES, BWD_DQ_LOCAL_TILES, BWD_DQ_SOFTCAP_TILES,
    BWD_DQ_TILES, BWD_DQ_VARLEN_ALIBI_TILES, BWD_DQ_VARLEN_SOFTCAP_TILES, BWD_LOCAL_TILES,
    BWD_LONG_TILES, BWD_SOFTCAP_TILES, BWD_TILES, BWD_VARLEN_ALIBI_TILES, BWD_VARLEN_LOCAL_TILES,
    BWD_VARLEN_SOFTCAP_COMPACT_TILES, BWD_VARLEN_SOFTCAP_TILES, BWD_VARLEN_TILES,
    ELEMENTWISE_TILES, FWD_COMBINE_LONG_TILES, FWD_COMBINE_PREFILL_TILES, FWD_COMBINE_TILES,
    FWD_COMPACT_TILES, FWD_SOFTCAP_TILES, FWD_SPLIT_COMPACT_TILES, FWD_SPLIT_LONG_TILES,
    FWD_SPLIT_PREFILL_TILES, FWD_SPLIT_TILES, FWD_TILES, FWD_VARLEN_LOCAL_SOFTCAP_TILES,
    FWD_VARLEN_TILES,
};

mod rules;
pub(crate) mod smem;
mod table;

/// Geometry of one sm_80 kernel: every choice the kernel body reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm80Tiles {
    /// Query rows per CTA.
    pub block_m: u32,
    /// Key/value rows per main-loop iteration.
    pub block_n: u32,
    /// Warps per CTA; each owns `block_m / warps` query rows (see [`Sm80Layout`]).
    pub warps: u32,
    /// Shared-memory buffers of the streamed operand (K/V in the forward, Q/dO in the
    /// backward), a power of two: 2 = load block j+1 while computing block j; 1 (forward
    /// only) = one K and one V buffer taking turns (V_j loads during Q K_j^T).
    pub stages: u32,
    /// Backward only: passes over the query blocks. 1 = dV and dK together; 2 = dV first,
    /// then dK and dQ, when both accumulators (d/2 f32 each per thread) don't fit at once.
    pub sweeps: u32,
    /// How the warps split the work and where operand fragments live.
    pub layout: Sm80Layout,
}

/// How an sm_80 kernel's warps split a block, and where operand fragments live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sm80Layout {
    /// Each warp owns `block_m / warps` rows (`block_n / warps` keys in the backward main
    /// pass); operand fragments are read from shared memory at every product.
    Streamed,
    /// As [`Sm80Layout::Streamed`], with the operand fragments kept in registers for the
    /// whole CTA: Q in the forward, K and V in the backward main pass, Q and dO in the dQ
    /// pass. Saves ldmatrix traffic; costs registers.
    Resident,
    /// FA2's warp layouts. Forward (`kernels::sm80::fwd_exchange`): warps pair up on
    /// 32-row blocks, splitting each key block for S and the head dim for O, P through
    /// shared memory. Backward main pass (`kernels::sm80::bwd_exchange`): warps tile the
    /// key block in 32-key rows (two m-tiles each) times `warps / (block_n / 32)` groups
    /// that split the query block for S^T and dP^T and the head dim for dV and dK; P^T
    /// and dS^T pass between the layouts through shared memory. Every B fragment then
    /// feeds two mma.
    Exchange,
    /// The backward's [`Sm80Layout::Exchange`] with the next query block's copies issued
    /// after the step's first product (S^T) instead of right after the iteration's
    /// barrier, where they would queue behind the previous block's burst of dQ atomics.
    ExchangeLatePrefetch,
    /// The split-KV forward for few packed rows (`kernels::sm80::key_split`): every warp
    /// owns all `block_m` = 16 rows and takes `block_n / warps` keys of each block, with
    /// its own softmax state; the warps' states merge through shared memory at the end.
    /// A decode step's rows fit one m16 tile, and each warp's chain of products per block
    /// is `warps` times shorter.
    KeySplit,
}

impl Sm80Layout {
    /// Operand fragments stay in registers.
    pub fn resident(self) -> bool {
        self == Resident
    }
    /// One of the exchange layouts.
    pub fn exchange(self) -> bool {
        matches!(self, Exchange | ExchangeLatePrefetch)
    }
    /// The streamed operand's next block is fetched after the first product.
    pub fn late_prefetch(self) -> bool {
        self == ExchangeLatePrefetch
    }
    /// The warps share the rows and split the keys ([`Sm80Layout::KeySplit`]).
    pub fn key_split(self) -> bool {
        self == KeySplit
    }
}

/// A table row: (block_m, block_n, warps, stages, sweeps), streamed layout.
const fn tc(block_m: u32, block_n: u32, warps: u32, stages: u32, sweeps: u32) -> Sm80Tiles {
    Sm80Tiles {
        block_m,
        block_n,
        warps,
        stages,
        sweeps,
        layout: Streamed,
    }
}

impl Sm80Tiles {
    /// The same tiles in `layout`.
    pub const fn with(self, layout: Sm80Layout) -> Self {
        Sm80Tiles { layout, ..self }
    }

    /// Threads per CTA (`32 * warps`).
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }
}

/// The sm_80 row of `spec`: its tiling's row of its pass and head dim. Panics for an
/// unsupported spec.
pub(crate) fn row(spec: &KernelSpec) -> Sm80Tiles {
    tiling_row(spec).unwrap_or_else(|| panic!("{} has no {:?} tile row", spec.name(), spec.tiling))
}

/// The row of `spec`'s tiling, pass and head dim, if the table has one.
pub(crate) fn tiling_row(spec: &KernelSpec) -> Option<Sm80Tiles> {
    let find = |table: &[(u32, Sm80Tiles)]| {
        table
            .iter()
            .find(|(d, _)| *d == spec.head_dim)
            .map(|&(_, t)| t)
    };
    match (spec.tiling, spec.pass.tile_pass()) {
        // (a softcap: its rows first; a window: its rows next)
        (Tiling::Standard, Pass::Bwd) => {
            let varlen = spec.pass.is_varlen();
            let softcap = (spec.scores == Scores::Softcap).then(|| match varlen {
                true => find(&BWD_VARLEN_SOFTCAP_TILES),
                false => find(&BWD_SOFTCAP_TILES),
            });
            let local = (spec.mask == Mask::Local).then(|| match varlen {
                true => find(&BWD_VARLEN_LOCAL_TILES),
                false => find(&BWD_LOCAL_TILES),
            });
            let packed = varlen.then(|| find(&BWD_VARLEN_TILES));
            let alibi = spec.scores == Scores::Alibi && varlen;
            (softcap.flatten())
                .or_else(|| alibi.then(|| find(&BWD_VARLEN_ALIBI_TILES)).flatten())
                .or(local.flatten())
                .or(packed.flatten())
                .or_else(|| find(&BWD_TILES))
        }
        (Tiling::Standard, Pass::BwdDq) => {
            let softcap = (spec.scores == Scores::Softcap).then(|| match spec.pass.is_varlen() {
                true => find(&BWD_DQ_VARLEN_SOFTCAP_TILES),
                false => find(&BWD_DQ_SOFTCAP_TILES),
            });
            let local = (spec.mask == Mask::Local).then(|| find(&BWD_DQ_LOCAL_TILES));
            let alibi = spec.scores == Scores::Alibi && spec.pass.is_varlen();
            (softcap.flatten())
                .or_else(|| alibi.then(|| find(&BWD_DQ_VARLEN_ALIBI_TILES)).flatten())
                .or(local.flatten())
                .or_else(|| find(&BWD_DQ_TILES))
        }
        // (varlen: its own rows first; softcap: its rows before the plain ones)
        (Tiling::Standard, Pass::Fwd) => {
            let both = spec.mask == Mask::Local && spec.scores == Scores::Softcap;
            let varlen = spec.pass.is_varlen().then(|| {
                let local_softcap = both.then(|| find(&FWD_VARLEN_LOCAL_SOFTCAP_TILES));
                local_softcap.flatten().or_else(|| find(&FWD_VARLEN_TILES))
            });
            let softcap = (spec.scores == Scores::Softcap).then(|| find(&FWD_SOFTCAP_TILES));
            (varlen.flatten())
                .or(softcap.flatten())
                .or_else(|| find(&FWD_TILES))
        }
        // (varlen d256 runs the compact row as its standard one; no long rows: `long_row`)
        // the wide rows: the dense ones where the varlen standard row differs
        (Tiling::Wide, Pass::Bwd) if spec.pass.is_varlen() => {
            find(&BWD_VARLEN_TILES).and_then(|_| find(&BWD_TILES))
        }
        (Tiling::Wide, _) => None,
        // the backward's rows within 99 KiB: dense and varlen, every modifier, where the
        // standard row is not already the compact one (the windowed varlen d128's)
        (Tiling::Compact, Pass::Bwd | Pass::BwdDq) => {
            let varlen_softcap = spec.pass.is_varlen() && spec.scores == Scores::Softcap;
            let compact = match spec.pass.tile_pass() {
                Pass::Bwd => (varlen_softcap.then(|| find(&BWD_VARLEN_SOFTCAP_COMPACT_TILES)))
                    .flatten()
                    .or_else(|| find(&BWD_COMPACT_TILES)),
                _ => find(&BWD_DQ_COMPACT_TILES),
            };
            let standard = tiling_row(&spec.with_tiling(Tiling::Standard));
            compact.filter(|c| Some(*c) != standard)
        }
        (Tiling::Compact, _) if spec.pass.is_varlen() => None,
        (Tiling::Standard, Pass::BwdPre | Pass::BwdPost | Pass::BwdKvSum) => {
            find(&ELEMENTWISE_TILES)
        }
        (Tiling::Standard, Pass::FwdSplit) => find(&FWD_SPLIT_TILES),
        (Tiling::Standard, Pass::FwdCombine) => find(&FWD_COMBINE_TILES),
        (Tiling::Standard, _) => None, // (not a tile pass)
        (Tiling::Long, _) => long_row(spec).map(|(_, t)| t),
        // (the softcap rows fit 99 KiB already: d256's is the compact row)
        (Tiling::Compact, Pass::Fwd) if spec.scores == Scores::Softcap => None,
        (Tiling::Compact, Pass::Fwd) => find(&FWD_COMPACT_TILES),
        (Tiling::Compact, Pass::FwdSplit) => find(&FWD_SPLIT_COMPACT_TILES),
        (Tiling::Compact, _) => None,
        (Tiling::Prefill, _) => prefill_row(spec).map(|(_, t)| t),
    }
}

/// The prefill row of `spec`'s pass and head dim, if it has one: for fwdsplit (the fewest
/// packed rows, tiles), for fwdcombine (the most splits, tiles).
pub(crate) fn prefill_row(spec: &KernelSpec) -> Option<(u32, Sm80Tiles)> {
    let table: &[(u32, u32, Sm80Tiles)] = match spec.pass.tile_pass() {
        // (plain scores without a window only: the window's bounds or a softcap under the
        // causal mask cost the 128-row tile 4 bytes of spills on sm_80, ptxas -v; those
        // variants run their long row)
        Pass::FwdSplit if spec.mask == Mask::Local || spec.scores != Scores::Plain => {
            return None;
        }
        Pass::FwdSplit => &FWD_SPLIT_PREFILL_TILES,
        Pass::FwdCombine => &FWD_COMBINE_PREFILL_TILES,
        _ => return None,
    };
    row_of(table, spec.head_dim)
}

/// The (threshold, tiles) of head dim `d` in a table of (head dim, threshold, tiles).
fn row_of(table: &[(u32, u32, Sm80Tiles)], d: u32) -> Option<(u32, Sm80Tiles)> {
    table
        .iter()
        .find(|(hd, _, _)| *hd == d)
        .map(|&(_, n, t)| (n, t))
}

/// The (fewest query rows, tiles) of the long row of `spec`'s pass and head dim (for
/// fwdsplit: the fewest packed rows, `seqlen_q * heads_per_kv`; for fwdcombine: the
/// fewest splits).
pub(crate) fn long_row(spec: &KernelSpec) -> Option<(u32, Sm80Tiles)> {
    if spec.pass.is_varlen() {
        return None; // (the varlen rows: `BWD_VARLEN_TILES`)
    }
    let table: &[(u32, u32, Sm80Tiles)] = match spec.pass.tile_pass() {
        Pass::Bwd => &BWD_LONG_TILES,
        Pass::FwdSplit => &FWD_SPLIT_LONG_TILES,
        Pass::FwdCombine => &FWD_COMBINE_LONG_TILES,
        _ => return None,
    };
    row_of(table, spec.head_dim)
}

/// Parses an sm_80 row `PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,FLAG...]` (flags: `resident`,
/// `exchange`, `late`); the caller checks it.
pub(super) fn parse_row(s: &str) -> Result<(Pass, u32, Sm80Tiles), String> {
    let bad = || {
        format!(
            "bad tile override `{s}`: expected PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,resident][,exchange][,late][,keysplit]"
        )
    };
    let (key, vals) = s.split_once('=').ok_or_else(bad)?;
    let (pass, d) = key.split_once(':').ok_or_else(bad)?;
    let pass = match pass {
        "fwd" => Pass::Fwd,
        "bwd" => Pass::Bwd,
        "bwddq" => Pass::BwdDq,
        "fwdsplit" => Pass::FwdSplit,
        _ => return Err(format!("{}: PASS is fwd, bwd, bwddq or fwdsplit", bad())),
    };
    let d: u32 = d.parse().map_err(|_| bad())?;
    let parts: Vec<&str> = vals.split(',').collect();
    let mut flags: Vec<&str> = parts.get(5..).unwrap_or_default().to_vec();
    flags.sort_unstable();
    let layout = match flags[..] {
        [] => Streamed,
        ["resident"] => Resident,
        ["exchange"] => Exchange,
        ["exchange", "late"] => ExchangeLatePrefetch,
        ["keysplit"] => KeySplit,
        ["late"] => {
            return Err(format!(
                "tile override `{s}`: late (prefetch) is a bwd option of the exchange layouts"
            ));
        }
        ["exchange", "resident"] => {
            return Err(format!(
                "tile override `{s}`: exchange and resident exclude each other"
            ));
        }
        _ => return Err(bad()),
    };
    if parts.len() < 5 {
        return Err(bad());
    }
    let n: Vec<u32> = parts[..5]
        .iter()
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    Ok((pass, d, tc(n[0], n[1], n[2], n[3], n[4]).with(layout)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tiles::{TileConfig, check, parse_override};

    /// Every row of the table (standard, long, compact) satisfies the layout rules.
    #[test]
    fn every_table_row_is_legal() {
        for spec in KernelSpec::all() {
            let t = TileConfig::Sm80(row(&spec));
            assert_eq!(check(spec.pass, spec.head_dim, &t), Ok(()), "{spec}");
        }
    }

    #[test]
    fn overrides_parse_and_refuse_garbage() {
        let parse = |s: &str| parse_override(s).map(|(p, d, t)| (p, d, *t.sm80()));
        let (pass, d, t) = parse("bwd:64=64,64,4,2,1,resident").unwrap();
        assert_eq!((pass, d), (Pass::Bwd, 64));
        assert_eq!(t, tc(64, 64, 4, 2, 1).with(Resident));
        let (_, _, t) = parse("fwd:256=128,32,8,2,1").unwrap();
        assert!(t.layout == Streamed && t.warps == 8);
        let (_, _, t) = parse("fwd:256=64,64,4,1,1").unwrap();
        assert_eq!(t.stages, 1);
        let (_, _, t) = parse("fwd:256=64,64,4,1,1,exchange").unwrap();
        assert!(t.layout == Exchange && t == FWD_TILES[7].1);
        let (_, _, t) = parse("bwd:128=64,128,8,2,1,exchange").unwrap();
        assert_eq!(t.layout, Exchange);
        let (_, _, t) = parse("bwd:128=64,128,8,2,1,late,exchange").unwrap();
        assert_eq!(t, BWD_LONG_TILES[0].2);
        for bad in [
            "fwd:256",
            "fwd=1,2,3,4,5",
            "fwd:x=1,2,3,4,5",
            "bwdpre:64=64,0,4,1,1",
            "fwd:64=1,2,3,4",
            "fwd:64=1,2,3,4,5,fast",
            "fwd:64=1,2,3,4,5,resident,7",
            "bwd:128=64,128,8,2,1,exchange,exchange",
            "fwd:128=128,32,4,2,1,late",
            "fwd:128=128,32,4,2,1,exchange,late",
            "bwd:128=64,64,4,2,1,resident,exchange",
            "fwd:128=128,32,4,3,1",
            "bwd:64=64,64,4,1,1",
            "fwd:100=128,32,4,2,1",
            "fwd:64=128,64,4,2,1,exchange",
            "fwd:64=64,64,4,1,1,exchange",
            "fwd:256=64,48,4,1,1,exchange",
            "fwd:256=16,64,4,1,1,exchange",
            "bwddq:64=64,64,4,2,2",
            "fwd:64=128,64,0,2,1",
            "fwd:64=128,64,16,2,1",
            "bwd:64=64,64,8,2,1",
            "bwd:128=64,64,4,2,2,exchange",
            "bwd:96=64,64,4,2,1,exchange",
            "bwd:64=64,64,2,2,1",
            "bwd:192=32,64,4,2,2",
            "fwd:32=64,16,4,2,1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
