#!/bin/bash
# Builds flash-ptx-candle's GPU binaries on a machine without a GPU or a CUDA install and
# packs them for a GPU machine: the GPU integration tests (every test target named gpu*:
# gpu, gpu_kv) and the `train_block` example (feature `gpu`: candle-core's `cuda`, so
# candle-kernels runs nvcc at build time).
#
#   scripts/candle-gpu-bundle.sh [CUDA]     # CUDA: a scripts/cuda-from-wheels.sh DEST (or
#                                           # its env.sh); default: $CUDA_WHEELS
#
# Out: target/candle-bundle/{gpu.gz,gpu_kv.gz,train_block.gz,run.sh} (stripped, gzipped).
# On the GPU machine: `OUT=/some/dir bash run.sh` (from any directory): it finds the CUDA 13
# libraries (system install or pip wheels), runs each GPU test binary (one test at a time),
# then train_block, then `fresh` (a fresh candle project's binary, fresh.gz) when the
# bundle holds it; logs under $OUT/logs and $OUT/logs.tgz.
#
# Env: CARGO_TARGET_DIR (default target/candle-gpu at the repository root), CANDLE_BUNDLE
# (the output folder, default target/candle-bundle). A first build
# takes ~10 min on 2 cores (candle-kernels' nvcc); after that only what changed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CUDA=${1:-${CUDA_WHEELS:-}}
if [ -z "$CUDA" ]; then
    echo "usage: $0 DEST   (DEST from scripts/cuda-from-wheels.sh DEST; or set CUDA_WHEELS)" >&2
    exit 2
fi
if [ -d "$CUDA" ]; then CUDA=$CUDA/env.sh; fi
[ -f "$CUDA" ] || { echo "no $CUDA: run scripts/cuda-from-wheels.sh first" >&2; exit 1; }
# shellcheck disable=SC1090
source "$CUDA"
command -v nvcc > /dev/null || { echo "nvcc not on PATH after sourcing $CUDA" >&2; exit 1; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/candle-gpu}
BUNDLE=${CANDLE_BUNDLE:-$ROOT/target/candle-bundle}
mkdir -p "$BUNDLE"
JSON=$(mktemp)
trap 'rm -f "$JSON"' EXIT

# The JSON messages go to the file (stdout), cargo's progress and errors to the terminal.
(cd "$ROOT/flash-ptx-candle" &&
    cargo build --release --features gpu --tests --examples --message-format=json > "$JSON")

# The artifacts' paths: the `executable` fields of the test targets named gpu* (gpu, gpu_kv:
# the GPU tests; a test binary's name carries a hash) and of the example `train_block`.
exe() { # KIND NAME-REGEX -> "name path" lines
    jq -r --arg k "$1" --arg n "$2" 'select(.reason == "compiler-artifact"
        and .executable != null and (.target.name | test($n))
        and (.target.kind | any(. == $k))) | "\(.target.name) \(.executable)"' "$JSON" | sort -u
}
TESTS=$(exe test '^gpu')
TRAIN=$(exe example '^train_block$')
if ! grep -q '^gpu ' <<< "$TESTS" || [ -z "$TRAIN" ]; then
    echo "the gpu test or the train_block example not found in cargo's JSON output" >&2
    exit 1
fi

pack() { # NAME BINARY
    strip -o "$BUNDLE/$1" "$2"
    gzip -c "$BUNDLE/$1" > "$BUNDLE/$1.gz"
    rm -f "$BUNDLE/$1"
    echo "$BUNDLE/$1.gz ($(du -h "$BUNDLE/$1.gz" | cut -f1)) <- $2"
}
while read -r name path; do pack "$name" "$path"; done <<< "$TESTS
$TRAIN"

cat > "$BUNDLE/run.sh" <<'EOF'
#!/bin/bash
# Written by scripts/candle-gpu-bundle.sh. On the GPU machine: OUT=DIR bash run.sh
cd "$(dirname "$0")"; L=$OUT/logs; mkdir -p $L
for f in *.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
# The CUDA 13 libraries the binaries link (dynamic-linking): a system install or pip wheels.
# libcuda.so.1 is the driver's own (the build's stub is never shipped).
LD=""; for lib in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudart.so.13 libnvrtc.so.13; do d=$(find /usr/local /usr/lib /opt $(python3 -c "import site;print(' '.join(site.getsitepackages()))" 2>/dev/null) -name "$lib" 2>/dev/null | head -1); [ -n "$d" ] && LD="$LD:$(dirname $d)"; echo "$lib -> $d" >> $L/libs.txt; done
export LD_LIBRARY_PATH="${LD#:}:$LD_LIBRARY_PATH"; ldd ./gpu >> $L/libs.txt 2>&1
nvidia-smi > $L/nvidia-smi.txt 2>&1
# The GPU tests (gpu, gpu_kv, ...), one at a time.
for t in gpu gpu_*; do
  [ -x "$t" ] || continue
  timeout 300 ./$t --test-threads=1 --nocapture > $L/candle_$t.log 2>&1; echo "rc candle $t $?"; grep -E "test result|panicked|worst" $L/candle_$t.log | tail -8; echo "ok: $(grep -c ' \.\.\. ok$' $L/candle_$t.log)"
  tar czf $OUT/logs.tgz -C $OUT logs
done
# memcheck of the KV-cache, paged and varlen tests (one shape and dtype each)
if [ -x gpu_kv ]; then
  GPU_KV_QUICK=1 timeout 200 compute-sanitizer --error-exitcode 9 ./gpu_kv --test-threads=1 > $L/candle_gpu_kv_memcheck.log 2>&1; echo "rc memcheck gpu_kv $?"; grep -E "ERROR SUMMARY|test result" $L/candle_gpu_kv_memcheck.log
  tar czf $OUT/logs.tgz -C $OUT logs
fi
timeout 150 ./train_block > $L/train_block.log 2>&1; echo "rc train $?"; tail -4 $L/train_block.log
tar czf $OUT/logs.tgz -C $OUT logs
if [ -x fresh ]; then
  ldd ./fresh > $L/fresh_ldd.txt 2>&1
  timeout 150 ./fresh > $L/fresh.log 2>&1; echo "rc fresh $?"; tail -4 $L/fresh.log
  tar czf $OUT/logs.tgz -C $OUT logs
fi
EOF
chmod +x "$BUNDLE/run.sh"
echo "bundle $BUNDLE: $(ls "$BUNDLE" | tr "\n" " ")"
