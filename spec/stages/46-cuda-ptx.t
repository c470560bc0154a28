#!/usr/bin/env bash
# The CUDA kernels' PTX (src/compute/cuda/ptx/, embedded in the module) against its source: with
# the CUDA toolkit (CUDA_HOME, default /usr/local/cuda), `make ptx` into a scratch folder must
# give the committed files byte for byte, and ptxas must assemble every family for sm_80 (A100)
# and sm_90 (H100, H200). Without a toolkit the stage skips, saying so: the module itself needs
# none. The C build of the same kernels runs in the fake driver (stage 45).
source "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$CUDA_HOME/bin/nvcc
PTXAS=$CUDA_HOME/bin/ptxas
[[ -x $NVCC && -x $PTXAS ]] || skip_all "no CUDA toolkit at $CUDA_HOME (nvcc and ptxas are needed to check the PTX)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
step "make ptx regenerates the PTX from src/compute/cuda/kernels.cu" make -s ptx PTX_DIR="$scratch" NVCC="$NVCC"
for ptx in src/compute/cuda/ptx/family*.ptx; do
  name=$(basename "$ptx")
  step "$name matches its source (make ptx)" cmp "$ptx" "$scratch/$name"
  for arch in sm_80 sm_90; do
    step "$name assembles for $arch" "$PTXAS" -arch="$arch" -o "$scratch/${name%.ptx}-$arch.cubin" "$ptx"
  done
done
exit 0
