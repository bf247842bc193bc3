//! Manifest layer: the `manifest.json` the offline generator writes next to the `.ptx`
//! files, so that CuPy, PyTorch or C++ users can load and launch a kernel without Rust.
//!
//! Everything here is read from the one source of each fact: names and fields from
//! [`KernelSpec`], target and ISA version from [`crate::ptx::Target`], parameters and launch
//! geometry from [`crate::abi`], tiles from [`KernelSpec::tiles`]. Output is deterministic:
//! structs serialize in field order and kernels in the order given.

use serde::{Deserialize, Serialize};

use crate::abi;
use crate::spec::{KernelPlan, KernelSpec, TileConfig, Tiling, Tuning};

/// Version of the manifest's own layout; bumped when a field changes meaning or goes away.
pub const FORMAT: u32 = 2;

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
    /// atomic mode (non-null `dq_accum`). Null for the standard tiling.
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
    Manifest {
        format: FORMAT,
        generator: Generator {
            name: "flash-ptx".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        notes: notes(),
        kernels: specs.iter().map(|s| kernel(&s.plan(tuning))).collect(),
    }
}

impl Manifest {
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

/// The manifest entry of one planned kernel.
pub fn kernel(plan: &KernelPlan) -> KernelInfo {
    let spec = &plan.spec;
    let target = crate::kernels::target(spec.arch);
    let (major, minor) = target.ptx_version();
    let (cc_major, cc_minor) = spec.arch.min_compute_capability();
    let launch = abi::launch(plan);
    KernelInfo {
        name: spec.name(),
        file: file_name(spec),
        spec: *spec,
        min_seqlen_q: match spec.tiling {
            Tiling::Long => spec.long_from(),
            _ => None,
        },
        smem_optin_below: match spec.tiling {
            Tiling::Compact => Some(spec.with_tiling(Tiling::Standard).smem_bytes()),
            _ => None,
        },
        target: target.name().to_string(),
        ptx_version: format!("{major}.{minor}"),
        min_compute_capability: format!("{cc_major}.{cc_minor}"),
        params: abi::params(spec.pass)
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

fn tensor(name: &str, shape: &[&str], dtype: &str, access: &str) -> TensorNote {
    TensorNote {
        name: name.to_string(),
        shape: shape.iter().map(|s| s.to_string()).collect(),
        dtype: dtype.to_string(),
        access: access.to_string(),
    }
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const SEMANTICS: &[&str] = &[
    "o[b, i, h, :] = sum_j softmax_j(q[b, i, h, :] . k[b, j, h / heads_per_kv, :] * softmax_scale) * v[b, j, h / heads_per_kv, :] (FlashAttention-2 forward)",
    "heads % heads_k == 0; heads_per_kv = heads / heads_k (1 = multi-head, heads = multi-query, otherwise grouped-query)",
    "causal kernels mask key j for query i when j > i + seqlen_k - seqlen_q (bottom-right aligned, as FlashAttention >= 2.1)",
    "lse[b, h, i] = natural log of sum_j exp(scores[i, j] * softmax_scale) over the unmasked keys",
    "a query row with no unmasked key gets o = 0 and lse = -inf, never NaN",
    "accumulation is in f32; o is rounded once to the kernel's dtype",
];

const STRIDES: &str = "All strides are in elements, not bytes. The last dimension (head_dim) of q, k, v and o must be contiguous (stride 1); batch, sequence and head strides are free, so views and non-contiguous layouts work. lse is contiguous [batch, heads, seqlen_q] f32. Batch strides are u64, row and head strides u32.";

const ALIGNMENT: &str = "q, k, v and o base pointers must be 16-byte aligned, and every row start (batch, row and head strides times 2 bytes) a multiple of 16 bytes, i.e. strides are multiples of 8 elements; the kernels load and store 16 bytes at a time. lse needs 4-byte alignment.";

const SCALE_LOG2: &str = "scale_log2 = softmax_scale * log2(e) = softmax_scale * 1.4426950408889634, as an f32; softmax_scale must be positive and scale_log2 finite (the kernels track the max of the raw scores). The default softmax_scale is 1 / sqrt(d) with d the problem's head dim (the head_dim parameter, not the kernel's).";

const KERNEL_CHOICE: &str = "Pick the kernel with the problem's dtype and mask (spec.mask: none, or causal) and the smallest spec.head_dim >= d, where d is a multiple of 8 (at most 256), and spec.tiling = standard; pass d as the head_dim parameter (the kernel zero-fills the columns past d). A backward main pass (bwd) may instead run on its kernel with spec.tiling = long, same parameters and grid formula (with its own tiles), when seqlen_q >= min_seqlen_q and dq_accum is non-null: it computes the same, faster there. A forward (fwd) whose standard kernel needs more dynamic shared memory than the GPU allows per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN below its dynamic_smem_bytes: d256 on RTX 30/40, 99 KiB) runs on its kernel with spec.tiling = compact instead (smem_optin_below), same parameters and grid.";

const SHARED_MEMORY: &str = "Pass launch.dynamic_smem_bytes as the launch's dynamic shared memory. When needs_smem_opt_in is true (more than 48 KiB), first set the function attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuFuncSetAttribute attribute 8; CuPy: Function.max_dynamic_shared_size_bytes) to at least that many bytes, once per loaded function.";

const LAUNCH: &[&str] = &[
    "Load the .ptx file with cuModuleLoadData(Ex) (CuPy: cupy.RawModule(path=...)); the driver JIT-compiles it for the GPU at hand (compute capability >= min_compute_capability, driver supporting ptx_version).",
    "Get the function by the kernel's name, block = launch.block, grid = launch.grid evaluated with block_m = tiles.block_m (ceil = round up), shared memory = launch.dynamic_smem_bytes.",
    "Pass params in order, each exactly `size` bytes of its `numpy` type: device pointers as uint64, lse = 0 to skip writing it.",
];

const CUPY_EXAMPLE: &[&str] = &[
    "import json, math, cupy as cp, numpy as np",
    "man = json.load(open('ptx-out/manifest.json'))",
    "kern = next(k for k in man['kernels'] if k['name'] == 'fa2_fwd_d128_bf16_causal_sm80')",
    "fn = cp.RawModule(path='ptx-out/' + kern['file']).get_function(kern['name'])",
    "smem = kern['launch']['dynamic_smem_bytes']",
    "if kern['launch']['needs_smem_opt_in']: fn.max_dynamic_shared_size_bytes = smem",
    "# q, o: [b, sq, h, d]; k, v: [b, sk, hk, d] (2-byte elements, e.g. torch bf16 tensors); lse: f32 [b, h, sq]",
    "vals = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(), seqlen_q=sq, seqlen_k=sk, head_dim=d, heads=h, heads_per_kv=h // hk, scale_log2=d ** -0.5 * 1.4426950408889634, q_batch_stride=q.stride(0), q_row_stride=q.stride(1), q_head_stride=q.stride(2), k_batch_stride=k.stride(0), k_row_stride=k.stride(1), k_head_stride=k.stride(2), v_batch_stride=v.stride(0), v_row_stride=v.stride(1), v_head_stride=v.stride(2), o_batch_stride=o.stride(0), o_row_stride=o.stride(1), o_head_stride=o.stride(2))",
    "args = tuple(getattr(np, p['numpy'])(vals[p['name']]) for p in kern['params'])",
    "grid = (math.ceil(sq / kern['tiles']['block_m']), h, b)",
    "fn(grid, tuple(kern['launch']['block']), args, shared_mem=smem)",
];

fn notes() -> Notes {
    Notes {
        tensors: vec![
            tensor(
                "q",
                &["batch", "seqlen_q", "heads", "head_dim"],
                "kernel dtype",
                "read",
            ),
            tensor(
                "k",
                &["batch", "seqlen_k", "heads_k", "head_dim"],
                "kernel dtype",
                "read",
            ),
            tensor(
                "v",
                &["batch", "seqlen_k", "heads_k", "head_dim"],
                "kernel dtype",
                "read",
            ),
            tensor(
                "o",
                &["batch", "seqlen_q", "heads", "head_dim"],
                "kernel dtype",
                "write",
            ),
            tensor(
                "lse",
                &["batch", "heads", "seqlen_q"],
                "f32",
                "write (optional: pass 0 to skip)",
            ),
        ],
        semantics: lines(SEMANTICS),
        strides: STRIDES.to_string(),
        alignment: ALIGNMENT.to_string(),
        scale_log2: SCALE_LOG2.to_string(),
        kernel_choice: KERNEL_CHOICE.to_string(),
        shared_memory: SHARED_MEMORY.to_string(),
        launch: lines(LAUNCH),
        cupy_example: lines(CUPY_EXAMPLE),
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
            assert_eq!(k.params.len(), abi::params(s.pass).len());
            assert_eq!(k.launch.block[0], s.tiles().threads());
            assert_eq!(k.tiles, s.tiles());
        }
    }

    /// A compact kernel names the shared memory of the standard kernel it stands in
    /// for; no other entry has the field.
    #[test]
    fn compact_entries_name_the_standard_kernels_shared_memory() {
        for s in KernelSpec::all() {
            let k = kernel(&s.plan(&Tuning::NONE));
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
        let back: Manifest = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(back, m);
    }
}
