#!/bin/bash
# A CUDA 13.0 toolkit from NVIDIA's PyPI wheels, enough to BUILD candle-core 0.11 with its
# `cuda` feature (and flash-ptx-candle on top of it) on a machine with no CUDA install and
# no GPU: candle-kernels' build script runs nvcc (nvcc, ptxas, cicc, crt, cccl headers),
# and the binaries link cudart, cublas/cublasLt, curand and nvrtc (cudarc's
# `dynamic-linking`, which candle turns on) plus libcuda.
#
#   scripts/cuda-from-wheels.sh DEST        # then: source DEST/env.sh; cargo build ...
#
# Idempotent: does nothing when DEST/.complete exists (delete it to redo).
#
# The libcuda it makes (DEST/nvidia/cu13/lib/stubs/libcuda.so, soname libcuda.so.1) is a
# LINK-TIME STUB: every driver function cudarc 0.19.10 declares, each an empty body. It
# only satisfies the linker; the binaries are meant to run on a GPU machine, where the
# real driver's libcuda.so.1 is loaded instead (never put lib/stubs on LD_LIBRARY_PATH).
#
# Downloaded (pip wheels, ~692 MB in all; unpacked tree ~1.2 GB):
#   nvidia-cublas 13.0.2.14      421 MB    nvidia-cuda-nvcc 13.0.88      37 MB
#   nvidia-cuda-nvrtc 13.0.88     90 MB    nvidia-cuda-cccl 13.0.85     3.1 MB
#   nvidia-curand 10.4.5.25       77 MB    nvidia-cuda-runtime 13.0.96  2.2 MB
#   nvidia-nvvm 13.0.88           62 MB    nvidia-cuda-crt 13.0.88      0.1 MB
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi
mkdir -p "$1"
DEST=$(cd "$1" && pwd)
T=$DEST/nvidia/cu13

if [ -e "$DEST/.complete" ]; then
    echo "$DEST already complete (source $DEST/env.sh)"
    exit 0
fi

WHEELS=(
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-crt==13.0.88
    nvidia-cuda-cccl==13.0.85
    nvidia-cublas==13.0.2.14
    nvidia-curand==10.4.5.25
    nvidia-cuda-nvrtc==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-nvcc==13.0.88
)

# 1. Download (pip skips wheels already in DEST/wheels).
python3 -m pip download --no-deps --only-binary=:all: -d "$DEST/wheels" "${WHEELS[@]}"

# 2. Unpack: every wheel puts its files under nvidia/cu13/ (plus its .dist-info in DEST).
for spec in "${WHEELS[@]}"; do
    name=${spec%%==*}
    ver=${spec##*==}
    whl=$(ls "$DEST/wheels/${name//-/_}-${ver}-"*.whl)
    echo "unpacking $(basename "$whl")"
    python3 -m zipfile -e "$whl" "$DEST/"
done

# 3. zipfile drops the mode bits: make the tools executable again.
chmod +x "$T"/bin/* "$T"/nvvm/bin/*

# 4. The unversioned names the linker looks for (-lcublas ...), and lib64 (CUDA_HOME/lib64
#    is where some build scripts look).
cd "$T/lib"
for so in libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libcurand.so.10 libnvrtc.so.13; do
    [ -e "$so" ] || { echo "missing $T/lib/$so" >&2; exit 1; }
    ln -sfn "$so" "${so%.so.*}.so"
done
cd "$DEST"
ln -sfn lib "$T/lib64"

# 5. Link-time stub libcuda: one empty function per driver symbol cudarc declares.
SYS=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10/src/driver/sys/mod.rs 2>/dev/null | head -1 || true)
if [ -z "$SYS" ]; then
    # cudarc's sources come with cargo's first fetch of a crate that uses it.
    echo "cudarc-0.19.10 not in the cargo registry: run 'cargo fetch' in a crate that uses it first" >&2
    exit 1
fi
mkdir -p "$T/lib/stubs"
grep -oE "fn cu[A-Za-z0-9_]+\(" "$SYS" | sed 's/fn //;s/(//' | sort -u \
    | sed 's/.*/void &(void){}/' > "$DEST/cuda_stub.c"
echo "stub libcuda: $(wc -l < "$DEST/cuda_stub.c") symbols"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$T/lib/stubs/libcuda.so" "$DEST/cuda_stub.c"

# 6. Environment for cargo.
cat > "$DEST/env.sh" <<EOF
# source me before building candle (cuda) / flash-ptx-candle: written by cuda-from-wheels.sh
export CUDA_HOME=$T
export PATH=$T/bin:\$PATH
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}
# Link time only (the stub libcuda among them); at run time the GPU machine's own libs.
export LIBRARY_PATH=$T/lib:$T/lib/stubs
# candle-kernels' nvcc jobs in parallel.
export CUDAFORGE_THREADS=\$(nproc)
EOF

"$T/bin/nvcc" --version | tail -2
touch "$DEST/.complete"
echo "done: source $DEST/env.sh"
