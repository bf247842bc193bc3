#!/usr/bin/env bash
# The backward on the rows other GPUs get, emulated on an H100/H200, in one command from a
# bundle (`bash scripts/bwd_bundle.sh`: tests/, examples/, scripts/ side by side; run from
# its root): the backward GPU matrix (tests/gpu_bwd) unconstrained, under the A100
# emulation (163 KiB per block, 164 KiB per SM: `FLASH_PTX_TEST_SMEM` / `_SM`, the
# per-SM rule's compact rows at d64-d128) and the RTX one (99 KiB per block, 100 KiB per
# SM); gpu_varlen under the A100 emulation; then bench_bwd (bf16, 1K/4K/16K, both masks,
# FA2-paper heads): unconstrained, A100 automatic, A100 with the standard rows fixed
# (BENCH_TILING=standard, d64-d128: what the rule replaces), RTX automatic, in 2
# interleaved rounds. Every step under `timeout`, results tarred after each into
# OUT/emulation.tgz (a cut run keeps what it finished).
#
#   bash scripts/bwd_emulation_all.sh OUT_DIR        (about 8-9 minutes)
set -u
cd "$(dirname "$0")/.."
O="${1:?usage: bwd_emulation_all.sh OUT_DIR}"
W="$O/emulation"; mkdir -p "$W/bench"; S="$W/summary.txt"
save() { tar czf "$O/emulation.tgz" -C "$W" . ; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$S"
A100=(FLASH_PTX_TEST_SMEM=166912 FLASH_PTX_TEST_SMEM_SM=167936 FLASH_PTX_TEST_FWD_ARCH=sm80)
RTX=(FLASH_PTX_TEST_SMEM=101376 FLASH_PTX_TEST_SMEM_SM=102400 FLASH_PTX_TEST_FWD_ARCH=sm80)
matrix() {  # name, test binary, filter, env...
  local n=$1 t=$2 f=$3; shift 3; local t0=$SECONDS
  env "$@" timeout 100 "tests/$t" --test-threads=1 --nocapture $f > "$W/$n.log" 2>&1
  echo "$n rc $? ($((SECONDS - t0)) s)" >> "$S"
  grep -E "cases in|kernels loaded|compact|FAILED|panicked|test result" "$W/$n.log" | tail -5 >> "$S"
  save
}
matrix gpu_bwd_full gpu_bwd "" X=1
matrix gpu_bwd_a100 gpu_bwd "" "${A100[@]}"
matrix gpu_bwd_rtx gpu_bwd "" "${RTX[@]}"
matrix gpu_varlen_a100 gpu_varlen varlen_matches "${A100[@]}"
export BENCH_SEQ=1024,4096,16384 BENCH_CAUSAL=0,1 BENCH_DTYPE=bf16
ALL=32,64,96,128,160,192,224,256
bench() {  # name, env...
  local n=$1; shift
  env "$@" BENCH_OUT="$W/bench/$n.json" timeout 45 examples/bench_bwd > "$W/bench/$n.txt" 2>&1
  echo "bench $n rc $? (${SECONDS} s)" >> "$S"
}
for r in 1 2; do
  bench "full_r$r" BENCH_D=$ALL
  bench "a100_r$r" BENCH_D=$ALL BENCH_SMEM=166912 BENCH_SMEM_SM=167936
  bench "a100_std_r$r" BENCH_D=64,96,128 BENCH_SMEM=166912 BENCH_SMEM_SM=167936 BENCH_TILING=standard
  bench "rtx_r$r" BENCH_D=$ALL BENCH_SMEM=101376 BENCH_SMEM_SM=102400
  save
done
cat "$S"
