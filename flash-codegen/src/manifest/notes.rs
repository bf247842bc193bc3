//! Manifest layer: the `notes` of `manifest.json`, what every kernel shares: its tensors,
//! semantics, stride and alignment rules, how to pick a kernel and launch it, a CuPy
//! example. Text only; the per-kernel facts come from the spec and ABI layers.

use super::{Notes, TensorNote};

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

const KERNEL_CHOICE: &str = "Pick the kernel with the problem's dtype and mask (spec.mask: none, causal, or local for a sliding window, below) and the smallest spec.head_dim >= d, where d is a multiple of 8 (at most 256), and spec.tiling = standard; pass d as the head_dim parameter (the kernel zero-fills the columns past d). A backward main pass (bwd) may instead run on its kernel with spec.tiling = long, same parameters and grid formula (with its own tiles), when seqlen_q >= min_seqlen_q and dq_accum is non-null: it computes the same, faster there. A forward (fwd) whose standard kernel needs more dynamic shared memory than the GPU allows per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN below its dynamic_smem_bytes: d256 on RTX 30/40, 99 KiB) runs on its kernel with spec.tiling = compact instead (smem_optin_below), same parameters and grid; so do a backward main pass (bwd, bwdvarlen: d96 and up) and a dQ pass (bwddq, bwddqvarlen: d224, d256) whose standard, long or wide kernel needs more, same parameters, the grid formula with the compact kernel's own tiles. A backward main pass (bwd, bwdvarlen) also runs on its compact kernel where its kernel keeps fewer warps resident per SM on the GPU than at 228 KiB of shared memory per SM (the H100/H200 it was tuned on) and the compact one, fitting the per-block limit, keeps more: warps = min(floor(S / (dynamic_smem_bytes + 1024)), floor(65536 / (block threads * 256)), at least 1) * block threads / 32, S = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR (an A100's 164 KiB: bwd d64, d96 and d128, not the long kernel; bwdvarlen d96 and d128). A varlen backward main pass (bwdvarlen) at d64, d96 or d128 runs, on GPUs of compute capability >= 9.0 (its min_compute_capability), on its kernel with spec.tiling = wide: same parameters and grid formula (with its own tiles' block_n), faster there; on older GPUs its standard kernel (the wide one spills registers there). A sliding window (FlashAttention-2's window_size (left, right): query i sees key j when i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right) runs the forward's kernel with spec.mask = local: its parameters are the forward's plus window_left and window_right (u32; a bound at least seqlen_k (left) or seqlen_q (right), e.g. 0xffffffff, is unbounded), same grid; the window (unbounded, 0) is the causal kernel's and (unbounded, unbounded) the plain one's. Every score pass has local kernels (fwd, fwdvarlen, fwdsplit, fwdpaged, bwd, bwddq, bwdvarlen, bwddqvarlen; a windowed backward runs bwdpre and bwdpost as the plain one does, and bwd and bwddq with spec.mask = local and the window's two parameters); in fwdvarlen the window aligns per sequence (its own seqlen_k - seqlen_q), in fwdsplit and fwdpaged against each sequence's seqlens_k. Pick spec.scores = plain, or softcap for a logit softcap (Gemma 2: each scaled score x becomes softcap * tanh(x / softcap) before the mask and the softmax): a softcap kernel takes the parameters of its plain twin plus softcap (f32, finite, > 0) last, same grid; every score pass has softcap kernels under every mask (a softcapped backward runs bwdpre and bwdpost as the plain one does). Pick spec.scores = alibi for ALiBi (FlashAttention-2's alibi_slopes: the scaled score of query i and key j gets -slope * |i + seqlen_k - seqlen_q - j| added before the mask; the slope is that of the query head): an alibi kernel takes its plain twin's parameters plus alibi_slopes (u64, a device pointer to f32 slopes, [heads] or [batch, heads], 4-byte aligned) and alibi_batch_stride (u32: 0 for [heads] slopes, heads for [batch, heads]) last, same grid; every score pass has alibi kernels (fwd, fwdvarlen, fwdsplit, fwdpaged, bwd, bwddq, bwdvarlen, bwddqvarlen), under the masks none and causal (no local ones), chosen by the same rules as their plain twins (fwdsplit and fwdpaged: no prefill tiling); in fwdvarlen, bwdvarlen and bwddqvarlen a [batch, heads] slope table is indexed by the sequence. Grouped-query backward (heads_per_kv > 1): the dense main pass (bwd) takes heads, group_split_shift and dkv_partial after its strides; its grid is [ceil(seqlen_k / block_n), heads_k << group_split_shift, batch]. With group_split_shift = 0 one CTA per (key block, kv head) runs the whole group and writes dk and dv (dkv_partial may be 0). With group_split_shift = s > 0 (2^s at most heads_per_kv) CTA y = kv_head * 2^s + j runs query heads j, j + 2^s, ... of the group and writes its f32 partial dK (scaled) and dV to dkv_partial (scratch, f32 contiguous [2^s, 2, batch, seqlen_k, heads_k, head_dim]); then, before bwdpost or bwddq, run bwdkvsum (grid [ceil(seqlen_k / block_m), heads_k, batch], the same group_split_shift and dkv_partial), which writes dk and dv as the sums of the partials in split order (deterministic). The runtime picks the fewest splits that give bwd 8 CTAs per SM (ceil(seqlen_k / block_n) * heads_k * batch * 2^s >= 8 * SMs), at most heads_per_kv rounded down to a power of two; bwdvarlen has no split.";

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

const VARLEN: &[&str] = &[
    "Packed variable-length batches (fwdvarlen; backward: bwdprevarlen, bwdvarlen, then bwdpostvarlen in atomic mode or bwddqvarlen in deterministic mode, like the dense backward): q, o, dO, dq are [total_q, heads, head_dim] and k, v, dk, dv [total_k, heads_k, head_dim] (row and head strides free, head_dim contiguous, no batch stride); sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] (likewise cu_seqlens_k for keys), i32 [batch + 1] on the device, and its own attention problem (causal: bottom-right per sequence).",
    "Grids: [ceil(max_seqlen_q / block_m), heads, batch] (bwdvarlen: [ceil(max_seqlen_k / block_n), heads_k, batch]); max_seqlen_q and max_seqlen_k must be at least every sequence's length (rows past them are not computed). lse and D are f32 [heads, total_q]; dq_accum holds heads * 16 * ceil((total_q + 16 * batch) / 16) * head_dim f32 (zeroed by bwdprevarlen). A sequence with queries and no keys gets o = 0, lse = -inf, dq = 0; rows of no sequence are not written.",
    "The kernels clamp every offset to [0, total_q] (or [0, total_k]) and each end to at least its start, so no offset content makes them read or write outside the buffers; offsets that are not non-decreasing from 0 give meaningless values.",
];

const KV_CACHE: &[&str] = &[
    "Kernel choice: with packed rows = seqlen_q * heads_per_kv up to 16 (a decode step) run the fwdsplit kernel with spec.tiling = standard (the key-split layout), from 17 on (the long kernel's min_seqlen_q, which counts packed rows for fwdsplit) the one with spec.tiling = long (64-row tiles), and from the prefill kernel's min_seqlen_q on (128; d128 only) the one with spec.tiling = prefill (the dense forward's tile: a chunked prefill) where its CTAs (ceil(packed rows / block_m) * heads_k * batch) times min(64, floor(n / 2)) (n = ceil(seqlen_k / block_n), its tiles) reach the slots of the split rule below, else the long one; where the standard kernel needs more dynamic shared memory than the GPU allows per block, spec.tiling = compact. fwdcombine: spec.tiling = prefill (a row per warp, 4 rows a CTA: its tiles.block_m) up to 8 splits, standard (4 warps a row) from 9 to 32, long (8 warps a row) from 33 (its min_seqlen_q, which counts splits for fwdcombine); all three compute the same.",
    "Decode, speculative verification and chunked prefill against a KV cache run fwdsplit (grid [ceil(seqlen_q * heads_per_kv / block_m), heads_k, batch * num_splits]) and then, only when num_splits > 1, fwdcombine (grid [ceil(heads * seqlen_q / block_m), batch, 1]) on the same stream; with num_splits = 1, fwdsplit writes o and lse itself and o_accum / lse_accum may be 0.",
    "k and v are the caches [batch, seqlen_k (capacity), heads_k, head_dim], any strides with a contiguous head_dim; seqlens_k (i32 [batch], or 0 for full caches) holds the valid keys of each sequence; the kernels clamp each value to [0, seqlen_k], so no value makes them read or write out of bounds. The queries are the last seqlen_q positions of each sequence: causal masks key j for query i when j > i + seqlens_k[b] - seqlen_q. A sequence of length 0 gives o = 0 and lse = -inf.",
    "Partial buffers (f32, contiguous, scratch the caller allocates and never reads): o_accum [num_splits, batch, heads * seqlen_q, head_dim_kernel] and lse_accum [num_splits, batch, heads * seqlen_q], rows in packed order: row kv_head * heads_per_kv * seqlen_q + position * heads_per_kv + head % heads_per_kv. fwdsplit writes every element of both before fwdcombine reads them; no zeroing is needed.",
    "Split j of a sequence with n key blocks (ceil(min(seqlens_k[b], seqlen_k) / block_n), causal: up to the diagonal of the block's last query) runs blocks [j * ceil(n / num_splits), (j + 1) * ceil(n / num_splits)) clipped to n; any num_splits >= 1 is correct, more than ceil(seqlen_k / block_n) only adds empty splits.",
    "The runtime's split rule (after FlashAttention-3's): slots = SMs x CTAs per SM of fwdsplit (the fewer of 228 KiB / (dynamic_smem_bytes + 1 KiB) and 65536 / (256 x threads per CTA), at least 1); total = grid.x * heads_k * batch; n = ceil(seqlen_k / block_n). If total >= 0.8 slots: 1 split, unless one KV head's K and V (seqlen_k * head_dim * 4 bytes) exceed 50 MiB (L2), grid.x >= 2 slots and the mask is not causal: then ceil(bytes / 50 MiB), at most 128. Else if n <= 4, or if total >= 0.45 slots and seqlen_k * head_dim * 4 < 4 MiB: 1. Else, with max = min(64, slots, floor(n / 2)) (two key blocks a split at least, 64 splits at most): max when total * max <= slots, otherwise the smallest s in 1..=max whose wave efficiency w / ceil(w), w = total * s / slots, is at least 0.95 of the best.",
    "Paged caches run fwdpaged instead of fwdsplit: the same kernels, tilings, grid, partial buffers and combine step, with four more parameters; the same split rule, except that with pages smaller than fwdsplit's block_n the rule skips its 'total >= 0.45 slots and under 4 MiB: 1' step and takes max = min(128, slots, floor(n / 2)). k and v point at pools [num_pages, page_size, heads_k, head_dim] (their batch strides are the page strides), seqlen_k = max_pages * page_size, block_table (i32 [batch, max_pages]) maps key n of sequence b to row n % page_size of page block_table[b, n / page_size], page_shift = log2(page_size) (any power of two; 1, 8 and 16 to 256 are tested), num_pages >= 1 and max_pages >= 1 (or max_pages = 0, seqlen_k = 0: an empty cache, nothing of the table or pools read), the pools' page and row strides below 2^31 elements each, seqlen_k at most 2^31 - 1024. The kernel clamps every table entry it reads to [0, num_pages) and every table index to [0, max_pages), so no table content makes it read outside the pools or the table; entries past a sequence's seqlens_k may hold anything.",
    "Sliding window and softcap (fwdsplit, fwdpaged): the kernels with spec.mask = local or spec.scores = softcap take their plain twin's parameters plus window_left, window_right and softcap (as the forward's, in that order), same grid and combine step (the combine has neither); they have no prefill tiling (from 17 packed rows on they run long). The same for spec.scores = alibi (parameters alibi_slopes and alibi_batch_stride last; each packed row takes its own query head's slope). A window's key blocks are those its packed rows reach (from the first position's diagonal - left to the last position's diagonal + right), split as above over that range; the runtime's split rule then counts n from min(seqlen_k, left + seqlen_q + right) keys instead of seqlen_k. A window needs seqlen_q + seqlen_k below 2^31 - 256.",
];

pub(super) fn notes() -> Notes {
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
            tensor("seqlens_k", &["batch"], "i32", "read (optional: pass 0)"),
            tensor(
                "o_accum",
                &["num_splits", "batch", "heads * seqlen_q", "head_dim_kernel"],
                "f32",
                "scratch: written by fwdsplit, read by fwdcombine",
            ),
            tensor(
                "lse_accum",
                &["num_splits", "batch", "heads * seqlen_q"],
                "f32",
                "scratch: written by fwdsplit, read by fwdcombine",
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
        kv_cache: lines(KV_CACHE),
        varlen: lines(VARLEN),
    }
}
