//! Manifest layer: the `sm90a` section of `manifest.json` (format 3): the Hopper forward
//! kernels (`kernels::sm90::fwd`, sm_90a: wgmma, TMA, mbarrier) that `flash-codegen emit
//! --all` writes, with what a CuPy, cuda-python or C++ caller needs to launch one from its
//! PTX file: its parameters (three `CUtensorMap`s by value, then the scalars, each with its
//! offset and alignment), its launch geometry, and per tensor map the arguments of
//! `cuTensorMapEncodeTiled` ([`maps`]).
//!
//! The kernel's facts come from the kernel ([`fwd::Variant`], [`fwd::MAPS`],
//! [`fwd::SCALARS`], [`fwd::BLOCK_N`]); this file adds their meanings, which the tests
//! below check against them and tests/manifest_sm90.rs against the PTX entry and
//! flash-runtime's tensor maps.

use serde::{Deserialize, Serialize};

use super::{LaunchInfo, SMEM_DEFAULT_LIMIT};
use crate::kernels::sm90::fwd;
use crate::ptx::{ParamTy, Target};
use crate::spec::{DType, Mask, Pass, Scores};

pub mod maps;
mod notes;
mod params;

pub use params::PARAMS;

pub use maps::{Enumerant, TensorMapInfo};

/// The architecture tag of the section's kernels (`arch`).
pub const ARCH: &str = "sm90a";

/// The one compute capability sm_90a code runs on: its `a` features are not forward
/// compatible, so it is both the minimum and the maximum.
pub const COMPUTE_CAPABILITY: &str = "9.0";

/// The `sm90a` section: what its kernels share, then one entry per kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm90a {
    /// How to choose, build the tensor maps of, and launch an sm_90a kernel.
    pub notes: Vec<String>,
    /// One entry per kernel, in the order given to [`section`].
    pub kernels: Vec<Sm90aKernel>,
}

/// One sm_90a kernel: its file, its variant, its ABI, tensor maps and launch geometry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm90aKernel {
    /// The `.entry` name (also the file stem), [`fwd::Variant::name`].
    pub name: String,
    /// The PTX file, relative to the manifest.
    pub file: String,
    /// [`ARCH`].
    pub arch: String,
    /// What the kernel computes and how it is scheduled.
    pub variant: Sm90aVariant,
    /// The module's `.target` (`sm_90a`).
    pub target: String,
    /// The module's `.version` (`8.0`): the driver must support at least this PTX ISA.
    pub ptx_version: String,
    /// The lowest compute capability that runs the kernel ([`COMPUTE_CAPABILITY`]).
    pub min_compute_capability: String,
    /// The highest one ([`COMPUTE_CAPABILITY`]: sm_90a code runs on 9.0 only).
    pub max_compute_capability: String,
    /// Kernel parameters in launch order.
    pub params: Vec<Sm90aParam>,
    /// How to encode each tensor-map parameter, in parameter order.
    pub tensor_maps: Vec<TensorMapInfo>,
    /// Block, grid formula and dynamic shared memory.
    pub launch: LaunchInfo,
    /// The tile sizes the grid formula refers to.
    pub tiles: Sm90aTiles,
}

/// The variant's fields ([`fwd::Variant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm90aVariant {
    /// The pass (`fwd`).
    pub pass: Pass,
    /// The head dim, which the problem's must equal (64 or 128).
    pub head_dim: u32,
    /// Element type of q, k, v and o.
    pub dtype: DType,
    /// `none`, `causal` (bottom-right aligned) or `local` (the sliding window).
    pub mask: Mask,
    /// The score transform: `plain`, `softcap` or `alibi`.
    pub scores: Scores,
    /// FA3's intra-warpgroup overlap.
    pub overlap: bool,
    /// FA3's pingpong between the consumer warpgroups.
    pub pingpong: bool,
    /// Consumer warpgroups (64 query rows each).
    pub consumers: u32,
    /// Bounded mbarrier waits that fail naming the barrier.
    pub debug: bool,
}

/// One parameter of an sm_90a kernel: a [`super::ParamInfo`] with its place in the
/// parameter buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm90aParam {
    /// Position in the launch's argument list (0-based).
    pub index: usize,
    /// The parameter's name in the PTX entry.
    pub name: String,
    /// The PTX `.param` type ([`crate::abi::AbiTy::name`]): `b8[128]` (a `CUtensorMap`), `u64`, `u32`,
    /// `f32`.
    #[serde(rename = "type")]
    pub ty: String,
    /// The numpy dtype of its bytes ([`crate::abi::AbiTy::numpy`]).
    pub numpy: String,
    /// Bytes it occupies; it must match exactly.
    pub size: u32,
    /// Its alignment in the parameter buffer (64 for a tensor map).
    pub align: u32,
    /// Its byte offset in the parameter buffer (`CU_LAUNCH_PARAM_BUFFER_POINTER`): the end
    /// of the one before, rounded up to `align`.
    pub offset: u32,
    /// What to pass, in words.
    pub meaning: String,
}

/// The tiles of an sm_90a forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sm90aTiles {
    /// Query rows per CTA ([`fwd::Variant::block_m`]; also the Q map's box rows).
    pub block_m: u32,
    /// Keys per block ([`fwd::BLOCK_N`]; also the K and V maps' box rows).
    pub block_n: u32,
}

/// The kernels `emit --all` writes: the configuration the runtime runs
/// (`validate::sm90_fwd_call`): overlapped and pingpong schedules, the default consumers,
/// the persistent grid with the dynamic scheduler, no debug build; both dtypes, every head dim,
/// no mask, causal and the sliding window with plain scores, then the score transforms
/// under the masks they come with ([`fwd::Variant::SCORED`]).
pub fn shipping() -> Vec<fwd::Variant> {
    let mut v = Vec::new();
    for dtype in DType::ALL {
        for head_dim in fwd::HEAD_DIMS {
            for mask in Mask::ALL {
                v.push(fwd::Variant::shipping_for(dtype, head_dim, mask));
            }
            for (scores, mask) in fwd::Variant::SCORED {
                v.push(fwd::Variant::shipping_scored(dtype, head_dim, mask, scores));
            }
        }
    }
    v
}

/// The PTX module text of variant `var`.
pub fn ptx(var: fwd::Variant) -> String {
    crate::ptx::print::module(&fwd::module(var))
}

/// The file a variant's PTX is written to.
pub fn file_name(var: &fwd::Variant) -> String {
    format!("{}.ptx", var.name())
}

/// The section of `variants`, in the order given.
pub fn section(variants: &[fwd::Variant]) -> Sm90a {
    Sm90a {
        notes: notes::notes(),
        kernels: variants.iter().map(kernel).collect(),
    }
}

/// The manifest entry of one variant.
pub fn kernel(var: &fwd::Variant) -> Sm90aKernel {
    let target = Target::Sm90a;
    let (major, minor) = target.ptx_version();
    let smem = var.smem_bytes();
    Sm90aKernel {
        name: var.name(),
        file: file_name(var),
        arch: ARCH.to_string(),
        variant: Sm90aVariant {
            pass: Pass::Fwd,
            head_dim: var.head_dim,
            dtype: var.dtype,
            mask: var.mask(),
            scores: var.scores,
            overlap: var.overlap,
            pingpong: var.pingpong,
            consumers: var.consumers,
            debug: var.debug,
        },
        target: target.name().to_string(),
        ptx_version: format!("{major}.{minor}"),
        min_compute_capability: COMPUTE_CAPABILITY.to_string(),
        max_compute_capability: COMPUTE_CAPABILITY.to_string(),
        params: params(var),
        tensor_maps: maps::tensor_maps(var),
        launch: LaunchInfo {
            block: [var.threads(), 1, 1],
            // a persistent variant (`_pers`, `_dyn`; not among those `emit` writes) walks
            // every tile from one CTA per SM
            grid: if var.persistent {
                [
                    "min(ceil(seqlen_q / block_m) * heads * batch, multiprocessors)",
                    "1",
                    "1",
                ]
            } else {
                ["ceil(seqlen_q / block_m)", "heads", "batch"]
            }
            .map(str::to_string),
            dynamic_smem_bytes: smem,
            needs_smem_opt_in: smem > SMEM_DEFAULT_LIMIT,
        },
        tiles: Sm90aTiles {
            block_m: var.block_m(),
            block_n: fwd::BLOCK_N,
        },
    }
}

/// The variant's parameters ([`fwd::Variant::maps`], [`fwd::Variant::scalars`]) as
/// manifest rows from [`PARAMS`], each at the offset the PTX parameter layout gives it.
fn params(var: &fwd::Variant) -> Vec<Sm90aParam> {
    let mut end = 0u32;
    let names = var
        .maps()
        .iter()
        .copied()
        .chain(var.scalars().into_iter().map(|s| s.0));
    names
        .map(|n| {
            *PARAMS
                .iter()
                .find(|p| p.0 == n)
                .expect("generator bug: a kernel parameter missing from PARAMS")
        })
        .enumerate()
        .map(|(index, (name, ty, meaning))| {
            let align = match ty.param_ty() {
                ParamTy::Bytes { align, .. } => align,
                ParamTy::Scalar(_) => ty.size(),
            };
            let offset = end.next_multiple_of(align);
            end = offset + ty.size();
            Sm90aParam {
                index,
                name: name.to_string(),
                ty: ty.name().to_string(),
                numpy: ty.numpy().to_string(),
                size: ty.size(),
                align,
                offset,
                meaning: meaning.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::AbiTy;

    /// The table's names and types are the kernel's, maps first.
    #[test]
    fn the_parameter_table_is_the_kernels() {
        let (maps, scalars) = PARAMS.split_at(fwd::MAPS_TST.len());
        for ((name, ty, _), want) in maps.iter().zip(fwd::MAPS_TST) {
            assert_eq!((*name, *ty), (want, AbiTy::TensorMap));
        }
        assert_eq!(scalars.len(), fwd::SCALARS.len());
        for ((name, ty, meaning), (want, t)) in scalars.iter().zip(fwd::SCALARS) {
            assert_eq!((*name, ty.scalar()), (want, Some(t)));
            assert!(!meaning.is_empty());
        }
    }

    /// Offsets follow the PTX layout: the maps at 0, 128, 256, then the scalars packed
    /// at their natural alignment (o_batch, a u64 after six 4-byte ones, at 424); the
    /// TMA epilogue's fourth map at 384 moves the scalars on by 128.
    #[test]
    fn offsets_follow_the_alignment() {
        let ship = fwd::Variant::shipping(DType::Bf16, 64, true);
        let var = fwd::Variant {
            tma_store: false,
            ..ship
        };
        let plain = fwd::Variant {
            persistent: false,
            dynamic: false,
            ..var
        };
        let p = params(&plain);
        assert_eq!(p.last().unwrap().name, "batch");
        let dynamic = params(&var);
        assert_eq!(dynamic[..p.len()], p[..]);
        let last = dynamic.last().unwrap();
        assert_eq!((last.name.as_str(), last.offset), ("tile_counter", 440));
        let at: Vec<(&str, u32, u32)> = p
            .iter()
            .map(|r| (r.name.as_str(), r.offset, r.align))
            .collect();
        assert_eq!(
            &at[..4],
            &[
                ("tm_q", 0, 64),
                ("tm_k", 128, 64),
                ("tm_v", 256, 64),
                ("o", 384, 8)
            ]
        );
        assert_eq!(at[11], ("o_batch", 424, 8));
        assert_eq!(at[12], ("scale_log2", 432, 4));
        assert_eq!(at[13], ("batch", 436, 4));
        let tst = params(&ship);
        assert_eq!((tst[3].name.as_str(), tst[3].offset), ("tm_o", 384));
        for (a, b) in tst[4..].iter().zip(&dynamic[3..]) {
            assert_eq!(
                (a.name.as_str(), a.offset),
                (b.name.as_str(), b.offset + 128)
            );
        }
    }

    /// 32 shipping kernels (8 per dtype and head dim: no mask, causal, the window; softcap
    /// under each; ALiBi without a mask and causal), the runtime's schedule with the TMA
    /// epilogue (a fourth map, o's), distinct names; each entry's launch is its variant's.
    #[test]
    fn shipping_kernels_and_their_entries() {
        let vars = shipping();
        assert_eq!(vars.len(), 32);
        let mut names: Vec<String> = vars.iter().map(fwd::Variant::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 32);
        let count = |s: Scores| vars.iter().filter(|v| v.scores == s).count();
        assert_eq!(
            [Scores::Plain, Scores::Softcap, Scores::Alibi].map(count),
            [12, 12, 8]
        );
        for v in &vars {
            // the persistent grid, tiles claimed from the counter
            assert!(
                v.overlap && v.pingpong && !v.debug && v.persistent && v.dynamic && v.tma_store,
                "{v:?}"
            );
            let k = kernel(v);
            assert_eq!(
                k.params.last().map(|p| p.name.as_str()),
                Some("tile_counter")
            );
            assert_eq!(k.file, format!("{}.ptx", k.name));
            assert_eq!(k.launch.block, [v.threads(), 1, 1]);
            assert_eq!(k.launch.dynamic_smem_bytes, v.smem_bytes());
            assert!(k.launch.needs_smem_opt_in, "{}", k.name);
            assert_eq!((k.tiles.block_m, k.tiles.block_n), (v.block_m(), 128));
            assert_eq!(
                (k.target.as_str(), k.ptx_version.as_str()),
                ("sm_90a", "8.0")
            );
            assert_eq!(k.tensor_maps.len(), 4);
            assert_eq!(k.params[3].name, "tm_o");
        }
    }
}
