//! Manifest layer: the `manifest.json` the offline generator writes next to the `.ptx`
//! files, so that CuPy, PyTorch or C++ users can load and launch a kernel without Rust.
//!
//! Everything here is read from the one source of each fact: names and fields from
//! [`KernelSpec`], target and ISA version from [`crate::ptx::Target`], parameters and launch
//! geometry from [`crate::abi`], tiles from [`KernelSpec::tiles`]; the sm_90a kernels'
//! from their variants ([`sm90a`]). Output is deterministic: structs serialize in field
//! order and kernels in the order given.

use serde::{Deserialize, Serialize};

use crate::abi;
use crate::spec::{KernelSpec, TileConfig, Tiling, Tuning};

mod notes;
pub mod sm90a;

use crate::kernels::sm90::fwd;
use notes::notes;

/// Version of the manifest's own layout; bumped when a field changes meaning, goes away or
/// is added. 3 added the `sm90a` section (the Hopper kernels and their tensor maps); every
/// field of format 2 keeps its meaning.
pub const FORMAT: u32 = 3;

/// The file name of the manifest, next to the `.ptx` files.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The JSON Schema (draft 2020-12) of `manifest.json`'s layout, [`FORMAT`] 3: every object
/// with its required fields and no others, the known string values as enums. Written next
/// to the manifest as [`SCHEMA_FILE`] by `flash-codegen emit --all`.
pub const SCHEMA: &str = include_str!("../manifest.schema.json");

/// The file name of [`SCHEMA`], next to the manifest.
pub const SCHEMA_FILE: &str = "manifest.schema.json";

/// Dynamic shared memory a kernel may use without opting in (48 KiB).
pub const SMEM_DEFAULT_LIMIT: u32 = 48 * 1024;

/// The whole `manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Layout version ([`FORMAT`]).
    pub format: u32,
    /// The tool and version that wrote the files.
    pub generator: Generator,
    /// What every kernel shares: layouts, semantics, launch rules, a CuPy example.
    pub notes: Notes,
    /// One entry per kernel, in the order given to [`manifest`].
    pub kernels: Vec<KernelInfo>,
    /// The sm_90a kernels (compute capability 9.0), with their notes and tensor maps
    /// (empty but for its notes unless built by [`manifest_with_sm90a`]).
    pub sm90a: sm90a::Sm90a,
}

/// Which generator wrote the files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generator {
    /// The generator's name (`flash-ptx`).
    pub name: String,
    /// The generator's version (the crate version).
    pub version: String,
}

/// What every kernel of the manifest has in common: tensors, semantics, how to launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notes {
    /// Every tensor a kernel may take: name, shape, dtype, access.
    pub tensors: Vec<TensorNote>,
    /// What the forward computes, GQA, causal alignment, fully masked rows.
    pub semantics: Vec<String>,
    /// Stride units and which dimensions must be contiguous.
    pub strides: String,
    /// Pointer and stride alignment the kernels need.
    pub alignment: String,
    /// How to compute the `scale_log2` parameter.
    pub scale_log2: String,
    /// Which kernel serves a problem's head dim.
    pub kernel_choice: String,
    /// When and how to raise the dynamic shared memory limit.
    pub shared_memory: String,
    /// How to load and launch a kernel, step by step.
    pub launch: Vec<String>,
    /// A complete CuPy launch, one line per entry.
    pub cupy_example: Vec<String>,
    /// The KV-cache forward (fwdsplit, then fwdcombine): launch sequence, split rule,
    /// partial buffers, seqlens_k.
    pub kv_cache: Vec<String>,
    /// The varlen passes (packed sequences): layout, offsets, grids, launch sequences.
    pub varlen: Vec<String>,
}

/// One tensor a kernel reads or writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorNote {
    /// The parameter name of the tensor (`q`, `k`, `v`, `o`, `lse`).
    pub name: String,
    /// Its dimensions, outermost first (e.g. `batch, seqlen_q, heads, head_dim`).
    pub shape: Vec<String>,
    /// Element type: `kernel dtype` or `f32`.
    pub dtype: String,
    /// `read` or `write` (and whether it is optional).
    pub access: String,
}

/// One kernel: its file, its key, its ABI and its launch geometry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The `.entry` name (also the file stem and the spec's name).
    pub name: String,
    /// The PTX file, relative to the manifest.
    pub file: String,
    /// The spec fields (pass, head dim, dtype, causal, tiling, arch).
    pub spec: KernelSpec,
    /// For a `long` tiling: the fewest query rows (`seqlen_q`) it is meant for; it then
    /// replaces the `standard` kernel of the same pass, head dim, dtype and causal flag in
    /// atomic mode (non-null `dq_accum`); for fwdsplit, the fewest packed rows
    /// (`seqlen_q * heads_per_kv`); for fwdcombine, the fewest splits (`num_splits`). Null
    /// for the standard tiling.
    pub min_seqlen_q: Option<u32>,
    /// For a `compact` tiling: the dynamic shared memory of the `standard` kernel it
    /// stands in for; it replaces that kernel on GPUs whose opt-in shared memory per block
    /// (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) is below this. Null
    /// otherwise.
    #[serde(default)]
    pub smem_optin_below: Option<u32>,
    /// The module's `.target` (`sm_80`).
    pub target: String,
    /// The module's `.version` (`7.0`): the driver must support at least this PTX ISA.
    pub ptx_version: String,
    /// The lowest compute capability that runs the kernel (`8.0`).
    pub min_compute_capability: String,
    /// Kernel parameters in launch order.
    pub params: Vec<ParamInfo>,
    /// Block, grid formula and dynamic shared memory.
    pub launch: LaunchInfo,
    /// The tile sizes the grid formula refers to (`block_m`, `block_n`, ...).
    pub tiles: TileConfig,
}

/// One kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamInfo {
    /// Position in the launch's argument list (0-based).
    pub index: usize,
    /// The parameter's name (see [`crate::abi`]).
    pub name: String,
    /// The PTX `.param` type ([`abi::AbiTy::name`]): `u64` (pointers and 64-bit strides),
    /// `u32`, `f32`, or `b8[128]` (a `CUtensorMap` by value, 64-byte aligned).
    #[serde(rename = "type")]
    pub ty: String,
    /// The numpy dtype to pass it as (`uint64`, `uint32`, `float32`; `V128`, 128 raw bytes,
    /// for a tensor map).
    pub numpy: String,
    /// Bytes the argument occupies; it must match exactly.
    pub size: u32,
    /// What to pass, in words.
    pub meaning: String,
}

/// How to launch one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchInfo {
    /// Threads per block (x, y, z).
    pub block: [u32; 3],
    /// Grid (x, y, z) as formulas over the problem sizes and `tiles`.
    pub grid: [String; 3],
    /// Dynamic shared memory bytes to pass at launch.
    pub dynamic_smem_bytes: u32,
    /// Whether `dynamic_smem_bytes` exceeds 48 KiB, so the function's
    /// MAX_DYNAMIC_SHARED_SIZE_BYTES attribute must be raised before the launch.
    pub needs_smem_opt_in: bool,
}

/// The manifest of `specs`, in the order given.
///
/// ```
/// use flash_codegen::{KernelSpec, manifest};
///
/// let spec: KernelSpec = "fa2_bwd_d64_f16_sm80".parse().unwrap();
/// let m = manifest::manifest(&[spec]);
/// let k = &m.kernels[0];
/// assert_eq!((k.file.as_str(), k.params[0].name.as_str()), ("fa2_bwd_d64_f16_sm80.ptx", "q"));
/// assert_eq!(k.launch.grid[0], "ceil(seqlen_k / block_n)");
/// assert!(m.to_json().contains("\"fa2_bwd_d64_f16_sm80\""));
/// ```
pub fn manifest(specs: &[KernelSpec]) -> Manifest {
    manifest_tuned(specs, &Tuning::NONE)
}

/// The manifest of `specs` built with `tuning`'s tile rows where they replace the
/// table's (what `flash-codegen emit --all --tile ...` writes).
pub fn manifest_tuned(specs: &[KernelSpec], tuning: &Tuning) -> Manifest {
    manifest_with_sm90a(specs, &[], tuning)
}

/// The manifest of `specs` (built with `tuning`'s tile rows) and of the sm_90a kernels
/// `variants` (what `flash-codegen emit --all` writes, with [`sm90a::shipping`]).
pub fn manifest_with_sm90a(
    specs: &[KernelSpec],
    variants: &[fwd::Variant],
    tuning: &Tuning,
) -> Manifest {
    Manifest {
        format: FORMAT,
        generator: Generator {
            name: "flash-ptx".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        notes: notes(),
        kernels: specs.iter().map(|s| kernel(s, tuning)).collect(),
        sm90a: sm90a::section(variants),
    }
}

impl Manifest {
    /// Reads a `manifest.json`, refusing another layout version than [`FORMAT`] with a
    /// message that says which it is (instead of a missing-field error).
    pub fn from_json(json: &str) -> Result<Manifest, String> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("manifest.json: {e}"))?;
        match v.get("format").and_then(serde_json::Value::as_u64) {
            Some(f) if f == u64::from(FORMAT) => {
                serde_json::from_value(v).map_err(|e| format!("manifest.json: {e}"))
            }
            Some(f) => Err(format!(
                "manifest.json has layout format {f}; this flash-ptx reads format {FORMAT} \
                 (regenerate it with this version's `flash-codegen emit --all`)"
            )),
            None => Err("manifest.json: no `format` field: not a flash-ptx manifest".into()),
        }
    }

    /// Pretty JSON with a final newline: the bytes of `manifest.json`.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("the manifest always serializes");
        s.push('\n');
        s
    }
}

/// The file a kernel's PTX is written to.
pub fn file_name(spec: &KernelSpec) -> String {
    format!("{}.ptx", spec.name())
}

/// The manifest entry of one kernel, built on its table row or `tuning`'s replacement.
pub fn kernel(spec: &KernelSpec, tuning: &Tuning) -> KernelInfo {
    let plan = &spec.plan(tuning);
    let target = crate::kernels::target(spec.arch);
    let (major, minor) = target.ptx_version();
    let (cc_major, cc_minor) = spec.min_compute_capability();
    let launch = abi::launch(plan);
    KernelInfo {
        name: spec.name(),
        file: file_name(spec),
        spec: *spec,
        min_seqlen_q: match spec.tiling {
            Tiling::Long => spec.long_from(),
            Tiling::Prefill => spec.prefill_from(),
            _ => None,
        },
        smem_optin_below: match spec.tiling {
            Tiling::Compact => Some(spec.with_tiling(Tiling::Standard).plan(tuning).smem.bytes),
            _ => None,
        },
        target: target.name().to_string(),
        ptx_version: format!("{major}.{minor}"),
        min_compute_capability: format!("{cc_major}.{cc_minor}"),
        params: abi::params_of(spec)
            .iter()
            .enumerate()
            .map(|(index, p)| param_info(index, p))
            .collect(),
        launch: LaunchInfo {
            block: launch.block,
            grid: launch.grid.map(str::to_string),
            dynamic_smem_bytes: launch.dynamic_smem_bytes,
            needs_smem_opt_in: launch.dynamic_smem_bytes > SMEM_DEFAULT_LIMIT,
        },
        tiles: plan.tiles,
    }
}

/// The manifest row of parameter `p`, the `index`-th of its pass: its type, numpy type and
/// size are those of its [`abi::AbiTy`].
pub fn param_info(index: usize, p: &abi::ParamDesc) -> ParamInfo {
    ParamInfo {
        index,
        name: p.name.to_string(),
        ty: p.ty.name().to_string(),
        numpy: p.ty.numpy().to_string(),
        size: p.ty.size(),
        meaning: p.meaning.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_spec_in_order() {
        let specs = KernelSpec::all();
        let m = manifest(&specs);
        assert_eq!(m.kernels.len(), specs.len());
        for (k, s) in m.kernels.iter().zip(&specs) {
            assert_eq!(k.name, s.name());
            assert_eq!(k.file, format!("{}.ptx", s.name()));
            assert_eq!(k.params.len(), abi::params_of(s).len());
            assert_eq!(k.launch.block[0], s.tiles().threads());
            assert_eq!(k.tiles, s.tiles());
        }
    }

    /// A compact kernel names the shared memory of the standard kernel it stands in
    /// for; no other entry has the field.
    #[test]
    fn compact_entries_name_the_standard_kernels_shared_memory() {
        for s in KernelSpec::all() {
            let k = kernel(&s, &Tuning::NONE);
            match s.tiling {
                Tiling::Compact => {
                    let standard = s.with_tiling(Tiling::Standard);
                    assert_eq!(k.smem_optin_below, Some(standard.smem_bytes()), "{s}");
                    assert!(k.launch.dynamic_smem_bytes < standard.smem_bytes(), "{s}");
                }
                _ => assert_eq!(k.smem_optin_below, None, "{s}"),
            }
        }
    }

    /// A row's type, numpy type and size are its `AbiTy`'s, a tensor map's included.
    #[test]
    fn param_rows_follow_their_type() {
        let row = |ty| param_info(3, &abi::ParamDesc::new("tm", ty, "m"));
        let cols = |r: ParamInfo| (r.index, r.ty, r.numpy, r.size);
        let want = |t: &str, n: &str, size| (3, t.to_string(), n.to_string(), size);
        assert_eq!(cols(row(abi::AbiTy::Ptr)), want("u64", "uint64", 8));
        assert_eq!(
            cols(row(abi::AbiTy::TensorMap)),
            want("b8[128]", "V128", 128)
        );
        let json = serde_json::to_string(&row(abi::AbiTy::TensorMap)).unwrap();
        assert!(
            json.contains(r#""type":"b8[128]","numpy":"V128","size":128"#),
            "{json}"
        );
    }

    #[test]
    fn json_round_trips() {
        let m = manifest(&KernelSpec::all());
        assert_eq!(Manifest::from_json(&m.to_json()), Ok(m.clone()));
        let old = m.to_json().replacen("\"format\": 3", "\"format\": 2", 1);
        let e = Manifest::from_json(&old).unwrap_err();
        assert!(e.contains("format 2") && e.contains("emit --all"), "{e}");
        let with = manifest_with_sm90a(&[], &sm90a::shipping(), &Tuning::NONE);
        assert_eq!(with.sm90a.kernels.len(), 32);
        assert_eq!(Manifest::from_json(&with.to_json()), Ok(with));
    }

    /// A tuned standard row moves the compact kernel's threshold with it.
    #[test]
    fn a_tuned_standard_row_moves_the_compact_threshold() {
        let tuning = Tuning::parse(&["fwd:256=64,64,4,2,1"]).unwrap();
        let compact: KernelSpec = "fa2_fwd_d256_bf16_compact_sm80".parse().unwrap();
        let standard = compact
            .with_tiling(Tiling::Standard)
            .plan(&tuning)
            .smem
            .bytes;
        assert_ne!(standard, compact.with_tiling(Tiling::Standard).smem_bytes());
        assert_eq!(kernel(&compact, &tuning).smem_optin_below, Some(standard));
    }
}
