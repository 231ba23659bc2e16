#!/usr/bin/env bash
# The GPU machine's whole job in one go: builds volt against the CUDA LibTorch of the machine's
# PyTorch (with the Debian deps carried in .gpu-deps, made by ../shared/gpu/prepare-deps.sh), runs
# the test suite (the CUDA tests included) and the GPU benchmarks (volt and Lightning side by side),
# and writes logs and tables to OUTDIR.
# usage: scripts/gpu.sh OUTDIR [build] [test] [bench] [lightning]   (default: all of them)
set -uo pipefail
out=${1:?usage: scripts/gpu.sh OUTDIR [build] [test] [bench] [lightning]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=" ${*:-build test bench lightning} "
cd "$(dirname "$0")/.."
deps=$PWD/${VOLT_GPU_DEPS:-.gpu-deps}
[ -d "$deps/usr" ] || { echo "gpu.sh: $deps missing: run ../shared/gpu/prepare-deps.sh .gpu-deps and carry it"; exit 2; }
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
export CMAKE_PREFIX_PATH="$deps/usr:$torch_prefix"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
site=$(python3 -c 'import site;print(" ".join(site.getsitepackages()))')
nccl_h=$(find /usr/local/cuda/include $site -name nccl.h 2>/dev/null | head -n 1)
export NCCL_INCLUDE_DIR=$(dirname "${nccl_h:-/usr/local/cuda/include/nccl.h}")
data=$deps/data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
rc=0

if [[ $steps == *" build "* ]]; then
  t0=$(date +%s)
  # The wheel ships no gloo headers. Debian's (carried in $deps/gloo-include) are used if they
  # compile against this LibTorch's ProcessGroupGloo.hpp; otherwise volt builds with NCCL only.
  gloo_flag=""
  if [ -d "$deps/gloo-include/gloo" ]; then
    ti=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))')
    printf '#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>\nint main(){auto o=c10d::ProcessGroupGloo::Options::create();return o->threads;}\n' >/tmp/gloo_probe.cpp
    if g++ -std=gnu++17 -fsyntax-only -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -I"$deps/usr/include" -I"$deps/gloo-include" \
         -isystem "$ti" -isystem "$ti/torch/csrc/api/include" -isystem /usr/local/cuda/include /tmp/gloo_probe.cpp \
         >"$out/gloo_probe.log" 2>&1; then
      gloo_flag="-DVOLT_GLOO_INCLUDE_DIR=$deps/gloo-include"; echo "gloo: Debian's headers fit"
    else
      echo "gloo: Debian's headers do not fit this LibTorch (see gloo_probe.log); NCCL only"
    fi
  fi
  # -I (searched before the -isystem dirs) makes Debian's fmt 9, which Debian's spdlog 1.10 needs,
  # win over the newer fmt the PyTorch wheel ships in torch/include.
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CXX_FLAGS="-I$deps/usr/include" $gloo_flag \
    >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -B2 -A12 "error" "$out/build.log" | head -150; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi

if [[ $steps == *" test "* ]]; then
  # The whole suite: the CPU tests check the LibTorch 2.x build, [cuda] ones the GPU paths.
  # VOLT_CTEST_ARGS narrows it (e.g. "-R CUDA"); logs append, so several runs can share OUTDIR.
  (cd build-gpu && ctest --output-on-failure -j8 --timeout 300 ${VOLT_CTEST_ARGS:-} >>"$out/ctest.log" 2>&1) || rc=1
  tail -n 25 "$out/ctest.log"
fi

if [[ $steps == *" bench "* ]]; then
  for v in ${VOLT_GPU_VARIANTS:-fsdp fsdp_ac ddp fsdp_offload fsdp_fp16}; do
    timeout 300 build-gpu/bench/bench_gpu "$data/wikitext-2" "$out/bench.jsonl" "$v" ${VOLT_GPU_BENCH_ARGS:-} \
      >>"$out/bench.log" 2>&1 || { echo "bench_gpu $v failed:"; tail -5 "$out/bench.log"; rc=1; }
  done
fi

if [[ $steps == *" lightning "* ]]; then
  for v in ${VOLT_LIGHTNING_VARIANTS:-"--strategy fsdp --ac 0" "--strategy fsdp --ac 1" "--strategy fsdp --ac 0 --precision 16-mixed"}; do
    timeout 300 python3 bench/gpu/lightning_fsdp.py "$data/lightning" "$out/bench.jsonl" $v ${VOLT_GPU_BENCH_ARGS:-} \
      >>"$out/lightning.log" 2>&1 || { echo "lightning $v failed:"; tail -5 "$out/lightning.log"; rc=1; }
  done
fi

[ -f "$out/bench.jsonl" ] && python3 bench/gpu/table.py "$out/bench.jsonl" | tee "$out/table.md"
exit $rc
