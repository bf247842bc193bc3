//! bench_fwd's environment switches (its header lists them): which sm_90a schedule and
//! variant `BENCH_PATH` names, and the modifiers and shapes the other `BENCH_*` set.

/// BENCH_PATH=sm90 (or sm90ovl, its overlapped schedule): time the sm_90a forward
/// instead of the sm80 one.
pub fn sm90() -> bool {
    std::env::var("BENCH_PATH").is_ok_and(|p| p.starts_with("sm90"))
}

/// Whether BENCH_PATH is one of `paths`.
fn bench_path_in(paths: &[&str]) -> bool {
    std::env::var("BENCH_PATH").is_ok_and(|p| paths.contains(&p.as_str()))
}

/// The persistent paths: sm90pers (static zigzag), sm90dyn (dynamic scheduler), sm90chain
/// (that with the tile edges chained), sm90ctst (that with the TMA epilogue), sm90tst
/// (sm90dyn with the TMA epilogue) and sm90qa (that with the next tile's Q early).
const PERSISTENT_PATHS: [&str; 6] = [
    "sm90pers",
    "sm90dyn",
    "sm90chain",
    "sm90ctst",
    "sm90tst",
    "sm90qa",
];

/// BENCH_PATH=sm90ovl, sm90pp or a persistent path: the overlapped schedule.
pub fn sm90_overlap() -> bool {
    bench_path_in(&["sm90ovl", "sm90pp"]) || bench_path_in(&PERSISTENT_PATHS)
}

/// A persistent BENCH_PATH (`PERSISTENT_PATHS`): the pingpong schedule on a persistent grid.
pub fn sm90_persistent() -> bool {
    bench_path_in(&PERSISTENT_PATHS)
}

/// BENCH_PATH=sm90dyn, sm90chain, sm90ctst, sm90tst or sm90qa: the persistent grid's
/// tiles claimed from a counter.
pub fn sm90_dynamic() -> bool {
    bench_path_in(&["sm90dyn", "sm90chain", "sm90ctst", "sm90tst", "sm90qa"])
}

/// BENCH_PATH=sm90chain (or sm90ctst): the tile edges chained.
pub fn sm90_chained() -> bool {
    bench_path_in(&["sm90chain", "sm90ctst"])
}

/// BENCH_PATH=sm90tst (or sm90qa, sm90ctst: chained): the epilogue through shared memory
/// and TMA.
pub fn sm90_tma_store() -> bool {
    bench_path_in(&["sm90tst", "sm90qa", "sm90ctst"])
}

/// BENCH_PATH=sm90qa: sm90tst with each next tile's Q loaded early.
pub fn sm90_q_ahead() -> bool {
    bench_path_in(&["sm90qa"])
}

/// BENCH_PATH=sm90pp (or any later schedule: sm90pers, sm90dyn, sm90chain, sm90tst,
/// sm90qa): overlapped, the consumers taking turns to issue.
pub fn sm90_pingpong() -> bool {
    let off = std::env::var("BENCH_SM90_PP").is_ok_and(|v| v == "0");
    sm90_overlap() && !bench_path_in(&["sm90ovl"]) && !off
}

/// BENCH_GROUP: query heads per KV head (GQA; default 1, at least 1).
pub fn group() -> usize {
    std::env::var("BENCH_GROUP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1usize)
        .max(1)
}

/// BENCH_SOFTCAP: a logit softcap (finite, > 0), none unset.
pub fn softcap() -> Option<f32> {
    std::env::var("BENCH_SOFTCAP")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// BENCH_FMA_EXP2: the sm90 kernel's FMA share of the softmax's `ex2` (0 to 4 quarters).
pub fn fma_exp2() -> Option<u32> {
    std::env::var("BENCH_FMA_EXP2")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// BENCH_FIXED_REF=1 (with BENCH_SOFTCAP, bf16, sm90 paths): the softcap's softmax on one
/// fixed reference (`fwd::Variant::fixed_ref`).
pub fn fixed_ref() -> bool {
    std::env::var("BENCH_FIXED_REF").is_ok_and(|s| s == "1")
}

/// BENCH_EDGE_MASKS=1 (with BENCH_WINDOW, sm90 paths): each masked key block checks only
/// the window edges it crosses (`fwd::Variant::edge_masks`).
pub fn edge_masks() -> bool {
    std::env::var("BENCH_EDGE_MASKS").is_ok_and(|s| s == "1")
}

/// BENCH_WINDOW: the sliding window's width w (window (w - 1, 0)), at least 1; none unset.
pub fn window() -> Option<usize> {
    std::env::var("BENCH_WINDOW")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&w: &usize| w >= 1)
}

/// BENCH_SM90_WGS: consumer warpgroups (default: the kernel's choice per head dim).
pub fn sm90_consumers() -> Option<u32> {
    std::env::var("BENCH_SM90_WGS")
        .ok()
        .and_then(|w| w.parse().ok())
}
