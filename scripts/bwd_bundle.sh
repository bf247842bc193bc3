#!/usr/bin/env bash
# A small GPU bundle for the backward's device commands (target/gpu-bundle, with every
# kernel's PTX, is over the device tool's 64 MiB): builds the backward GPU tests and
# bench_bwd and copies them with scripts/ into target/gb (about 12 MiB). Then, on the
# GPU machine, from target/gb: `tests/gpu_probe_sm90` and `tests/gpu_fwd_sm90` (the
# Hopper probe and first forward; issue 22: `bash scripts/sm90_all.sh OUT` runs them and
# the sm90 bench), `tests/gpu_fwd_select` (`forward_into`'s choice of the sm_90a forward,
# `ForwardArch`),
# `bash scripts/gqa_bwd_all.sh OUT` (the grouped-query bar
# beside FA2/cuDNN) and `bash scripts/bwd_emulation_all.sh OUT` (the A100 and RTX rows).
#
#   bash scripts/bwd_bundle.sh
#
# BUNDLE_DIR (default target/gb): where the bundle goes (a second bundle beside the first).
# BUNDLE_REVS="name=REV ...": also examples/bench_fwd_<name> per entry, bench_fwd as built
# at commit or branch REV (BUNDLE_REV_EXAMPLES="bench_fwd bench_window ...": those examples,
# each as <example>_<name>) (a worktree under target/), to time other builds beside this one
# in one device run (scripts/sm90_all.sh: SM90_RUNS="new=sm90dyn
# base=sm90dyn:::bench_fwd_base" after BUNDLE_REVS="base=main").
set -eu
cd "$(dirname "$0")/.."
GB="${BUNDLE_DIR:-target/gb}"
TESTS=(${BUNDLE_TESTS:-gpu_bwd gpu_varlen gpu_window_bwd gpu_alibi gpu_probe_sm90 gpu_fwd_sm90 gpu_fwd_select gpu_fwd gpu_embed_sm90 gpu_streams gpu_fwd_sm90_scores})
# BUNDLE_EXAMPLES="bench_window ...": more examples beside bench_bwd and bench_fwd
EXAMPLES=(bench_bwd bench_fwd ${BUNDLE_EXAMPLES:-})
ex_args=(); for e in "${EXAMPLES[@]}"; do ex_args+=(--example "$e"); done
cargo build --release --features gpu "${ex_args[@]}"
args=(); for t in "${TESTS[@]}"; do args+=(--test "$t"); done
cargo test --release --features gpu --no-run "${args[@]}" 2> target/bwd_bundle.log
rm -rf "$GB"; mkdir -p "$GB/tests" "$GB/examples" "$GB/scripts"
for e in "${EXAMPLES[@]}"; do cp "target/release/examples/$e" "$GB/examples/"; done
for t in "${TESTS[@]}"; do
  exe=$(grep -o "tests/$t.rs (target/release/deps/[^)]*)" target/bwd_bundle.log | sed 's/.*(\(.*\))/\1/')
  cp "$exe" "$GB/tests/$t"
done
cp scripts/*.py scripts/*.sh "$GB/scripts/"
for entry in ${BUNDLE_REVS:-}; do
  name=${entry%%=*}; rev=${entry#*=}
  wt="$PWD/target/rev-worktree"
  git worktree remove --force "$wt" 2>/dev/null || true
  git worktree add -f --detach "$wt" "$rev"
  for e in ${BUNDLE_REV_EXAMPLES:-bench_fwd}; do
    (cd "$wt" && CARGO_TARGET_DIR="$PWD/../v4wt" cargo build --release --features gpu --example "$e")
    cp "target/v4wt/release/examples/$e" "$GB/examples/${e}_$name"
  done
  git worktree remove --force "$wt"
done
du -sh "$GB"
# The sm_90a forward kernels' PTX and manifest (under 1 MiB), for
# `python3 scripts/manifest_sm90.py ptx-sm90a` from $GB on the GPU machine.
cargo build --release -p flash-codegen
target/release/flash-codegen emit --all --arch sm90a --out-dir "$GB/ptx-sm90a"
du -sh "$GB/ptx-sm90a" "$GB"
