#!/usr/bin/env bash
# The windowed backward of this build against another, side by side: bench_window's
# backward rows (bf16 d128 b2 h16, the runtime's tile rule) at each N (default 8K and
# 32K), BENCH_RUNS interleaved runs (base, new, base, new, ...), then per (N, row) the
# medians: ms of both builds, new / base speed, and each build's TFLOP/s ratios against
# its own causal row (unmasked and visited work). The two-build case of
# scripts/bwd_builds_ab.sh. Session 35 measured the BwdPost fold with it
# (docs/wip/bwd-dq-fold.patch, docs/bench/session35/).
#
#   bash scripts/bwd_window_ab.sh OUT_DIR   (from target/gb, after BUNDLE_REVS="base=REV"
#                                            BUNDLE_REV_EXAMPLES="bench_window")
set -u
cd "$(dirname "$0")/.."
BUILDS="base new" NS="${NS:-8192 32768}" exec bash scripts/bwd_builds_ab.sh "${1:?usage: bwd_window_ab.sh OUT_DIR}"
