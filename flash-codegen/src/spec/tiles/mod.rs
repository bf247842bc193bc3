//! Spec layer: the tile table, every geometric choice of every kernel in one place, one
//! tile-row type per architecture, and tuning rows passed into generation as a value.

use serde::{Deserialize, Serialize};

use super::{Arch, KernelSpec, Pass, Tiling};

pub mod sm80;

pub use sm80::{Sm80Layout, Sm80Tiles};

/// The tile row of one kernel: its architecture's row type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "arch", rename_all = "snake_case")]
pub enum TileConfig {
    /// A row of the sm_80 path (mma.sync warps, cp.async stages).
    Sm80(Sm80Tiles),
}

impl TileConfig {
    /// Query rows per CTA (the grid's `block_m`).
    pub fn block_m(&self) -> u32 {
        match self {
            TileConfig::Sm80(t) => t.block_m,
        }
    }
    /// Key rows per main-loop iteration (the backward's grid's `block_n`).
    pub fn block_n(&self) -> u32 {
        match self {
            TileConfig::Sm80(t) => t.block_n,
        }
    }
    /// Warps per CTA.
    pub fn warps(&self) -> u32 {
        match self {
            TileConfig::Sm80(t) => t.warps,
        }
    }
    /// Threads per CTA (`32 * warps`).
    pub fn threads(&self) -> u32 {
        32 * self.warps()
    }
    /// The sm_80 row (a generator bug for a row of another architecture).
    pub fn sm80(&self) -> &Sm80Tiles {
        match self {
            TileConfig::Sm80(t) => t,
        }
    }
}

/// Tile rows that replace table rows, for tuning: the generator's `--tile` flag, to
/// measure a configuration without editing the table. A value handed to generation
/// ([`KernelSpec::plan`], [`crate::generate_tuned`], [`crate::manifest::manifest_tuned`]):
/// the kernels keep their canonical names and the manifest records the tiles they were
/// built with; nothing else in the process sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    rows: Vec<(Pass, u32, TileConfig)>,
}

impl Tuning {
    /// No replacement: every kernel on its table row.
    pub const NONE: Tuning = Tuning { rows: Vec::new() };

    /// Tuning rows, each checked against its layout's rules.
    pub fn new(rows: Vec<(Pass, u32, TileConfig)>) -> Result<Self, String> {
        for (i, (pass, d, t)) in rows.iter().enumerate() {
            check(*pass, *d, t)?;
            if rows[..i].iter().any(|(p, e, _)| p == pass && e == d) {
                return Err(format!("two tile rows for {}:{d}", pass.name()));
            }
        }
        Ok(Tuning { rows })
    }

    /// Parses `--tile` values (see [`parse_override`]).
    pub fn parse<S: AsRef<str>>(rows: &[S]) -> Result<Self, String> {
        let rows = rows
            .iter()
            .map(|s| parse_override(s.as_ref()))
            .collect::<Result<_, _>>()?;
        Tuning::new(rows)
    }

    /// The replacement of (pass, head dim)'s standard row, if any.
    fn row(&self, pass: Pass, head_dim: u32) -> Option<TileConfig> {
        self.rows
            .iter()
            .find(|(p, d, _)| *p == pass && *d == head_dim)
            .map(|(_, _, t)| *t)
    }
}

/// Parses a tile override `PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,FLAG...]` for the sm_80
/// path (flags: `resident`, `exchange`, `late`), e.g. `fwd:256=128,32,8,2,1`,
/// `bwd:64=64,64,4,2,1,resident` or `bwd:128=64,128,8,2,1,exchange,late`; the row is
/// checked against its layout's rules.
pub fn parse_override(s: &str) -> Result<(Pass, u32, TileConfig), String> {
    let (pass, d, t) = sm80::parse_row(s)?;
    let t = TileConfig::Sm80(t);
    check(pass, d, &t).map_err(|why| format!("tile override `{s}`: {why}"))?;
    Ok((pass, d, t))
}

/// The rules a tile row must satisfy for (pass, head dim): the one place the kernels'
/// geometry is checked (table rows by a test, tuning rows when parsed, every plan when
/// made).
pub fn check(pass: Pass, head_dim: u32, t: &TileConfig) -> Result<(), String> {
    if !super::HEAD_DIMS.contains(&head_dim) {
        return Err(format!(
            "head dim {head_dim} has no kernel (one of {:?})",
            super::HEAD_DIMS
        ));
    }
    match t {
        TileConfig::Sm80(t) => t.check(pass.tile_pass(), head_dim),
    }
}

impl KernelSpec {
    /// The tile row from the one table (no tuning). Panics for an unsupported spec (a
    /// spec from `all()` or `FromStr` is always supported).
    pub fn tiles(&self) -> TileConfig {
        self.tiles_tuned(&Tuning::NONE)
    }

    /// The tile row with `tuning`'s replacement of this standard row, if it has one.
    pub fn tiles_tuned(&self, tuning: &Tuning) -> TileConfig {
        if self.tiling == Tiling::Standard {
            if let Some(t) = tuning.row(self.pass.tile_pass(), self.head_dim) {
                return t;
            }
        }
        match self.arch {
            Arch::Sm80 => TileConfig::Sm80(sm80::row(self)),
        }
    }
}
