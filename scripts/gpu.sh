#!/usr/bin/env bash
# The GPU machine's whole job in one go: builds volt against the CUDA LibTorch of the machine's
# PyTorch (with the Debian deps carried in .gpu-deps, made by ../shared/gpu/prepare-deps.sh), runs
# the test suite (the CUDA tests included) and the GPU benchmarks (volt and Lightning side by side),
# and writes logs and tables to OUTDIR.
# usage: scripts/gpu.sh OUTDIR [build] [test] [bench] [lightning] [llm] [ops]   (default: all of them)
#
# Each step builds only what it needs, so that one run fits in ten minutes: `build` makes volt_cli
# and bench_gpu, plus volt_tests and volt_test_worker when `test` is asked for too, and
# bench_llm_ops for `ops` (the Llama's rotary embeddings and loss, Hugging Face's form against
# volt's, at the `llm` step's shape: OUT/llm_ops.md).
# Environment (all optional):
#   VOLT_GPU_DEPS         the carried deps (default .gpu-deps; relative to the repository or absolute)
#   VOLT_GPU_BUILD_DIR    the build folder (default build-gpu)
#   VOLT_GPU_TEST_SOURCES a regular expression on test source paths: only those test files are built
#                         (e.g. "strategies/test_cuda|optim/"; default: all)
#   VOLT_CATCH_FILTER     Catch test specs (e.g. "[cuda]"): volt_tests runs them directly, instead
#                         of ctest for the [cuda] cases and then for the others
#   VOLT_CTEST_ARGS       extra ctest arguments for the others (e.g. "-R fsdp"; not -E) when
#                         VOLT_CATCH_FILTER is unset
#   VOLT_CTEST_JOBS       ctest's parallel jobs (default 8)
#   VOLT_GPU_VARIANTS, VOLT_GPU_BENCH_ARGS: volt's bench rows (separated by spaces) and their shape
#   VOLT_LIGHTNING_VARIANTS: Lightning's rows, each its flags, separated by ';'
#                         (e.g. "--strategy fsdp --ac 0;--strategy fsdp --ac 1")
#   VOLT_GPU_PROFILE=N    volt's rows also run N steps under LibTorch's profiler after the timed ones
#                         and print the kernels by time (OUT/bench.jsonl.profile-<variant>.txt)
#   VOLT_GPU_END=T        epoch seconds (date +%s) by which the script must be done: each test run and
#                         bench row is limited to the time left, and skipped when under 20 s is left
#   VOLT_GPU_DRY_RUN=1    print the commands instead of running them (tests/scripts checks them)
set -uo pipefail
out=${1:?usage: scripts/gpu.sh OUTDIR [build] [test] [bench] [lightning]}
shift
if [ -n "${VOLT_GPU_END:-}" ] && ! [[ $VOLT_GPU_END =~ ^[0-9]+$ ]]; then
  echo "gpu.sh: VOLT_GPU_END must be a time in epoch seconds, as \$(( \$(date +%s) + 540 )) gives; got '$VOLT_GPU_END'"
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=" ${*:-build test bench lightning llm ops} "
cd "$(dirname "$0")/.." || exit 2
dry=${VOLT_GPU_DRY_RUN:-0}
deps=${VOLT_GPU_DEPS:-.gpu-deps}
[[ $deps == /* ]] || deps=$PWD/$deps
bdir=${VOLT_GPU_BUILD_DIR:-build-gpu}
[ -d "$deps/usr" ] || { echo "gpu.sh: $deps missing: run ../shared/gpu/prepare-deps.sh .gpu-deps and carry it"; exit 2; }

# Runs a command, or prints it under VOLT_GPU_DRY_RUN=1.
run() {
  if [ "$dry" = 1 ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}
# Seconds a step may run: $1, or what is left before VOLT_GPU_END where that is less.
budget() {
  local s=$1 left
  if [ -n "${VOLT_GPU_END:-}" ]; then
    left=$((VOLT_GPU_END - $(date +%s)))
    ((left < s)) && s=$left
  fi
  echo "$s"
}
# True (and says so) when under 20 s are left before VOLT_GPU_END: the step named $1 is skipped.
out_of_time() {
  (($(budget 20) >= 20)) && return 1
  echo "gpu.sh: $1 skipped: VOLT_GPU_END reached"
  return 0
}

# The same in folder $1 (the test programs run in the build's tests/ folder, as ctest runs them).
run_in() {
  local dir=$1
  shift
  if [ "$dry" = 1 ]; then
    printf '+ cd %q &&' "$dir"
    printf ' %q' "$@"
    printf '\n'
  else
    (cd "$dir" && "$@")
  fi
}

# The carried .pc files (SentencePiece, xxHash, ...) say prefix=/usr: copies that point into $deps
# are searched first. CMake's find_package / find_library / find_path look under CMAKE_PREFIX_PATH.
pc_dir=$deps/pkgconfig
rm -rf "$pc_dir"
mkdir -p "$pc_dir"
for pc in "$deps"/usr/lib/*/pkgconfig/*.pc "$deps"/usr/lib/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -E -e "s#^([A-Za-z_]+)=/usr(/|\$)#\\1=$deps/usr\\2#" -e "s#-([IL])/usr/#-\\1$deps/usr/#g" "$pc" \
    >"$pc_dir/$(basename "$pc")"
done
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# No pkg-config on the machine: the carried one (prepare-deps.sh ... pkgconf pkgconf-bin libpkgconf3).
if ! command -v pkg-config >/dev/null && [ -x "$deps/usr/bin/pkgconf" ]; then export PKG_CONFIG="$deps/usr/bin/pkgconf"; fi

if [ "$dry" = 1 ]; then
  torch_prefix=TORCH_PREFIX
  site=""
else
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  site=$(python3 -c 'import site;print(" ".join(site.getsitepackages()))')
fi
export CMAKE_PREFIX_PATH="$deps/usr:$torch_prefix"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
# shellcheck disable=SC2086  # $site is a list of folders
nccl_h=$(find /usr/local/cuda/include $site -name nccl.h 2>/dev/null | head -n 1)
NCCL_INCLUDE_DIR=$(dirname "${nccl_h:-/usr/local/cuda/include/nccl.h}")
export NCCL_INCLUDE_DIR
data=$deps/data
[ "$dry" = 1 ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
rc=0
tests_built=1

if [[ $steps == *" build "* ]]; then
  t0=$(date +%s)
  targets=(volt_cli bench_gpu)
  [[ $steps == *" test "* ]] && targets+=(volt_tests volt_test_worker)
  [[ $steps == *" ops "* ]] && targets+=(bench_llm_ops)
  # The wheel ships no gloo headers. Debian's (carried in $deps/gloo-include) are used if they
  # compile against this LibTorch's ProcessGroupGloo.hpp; otherwise volt builds with NCCL only.
  gloo_flag=()
  if [ -d "$deps/gloo-include/gloo" ] && [ "$dry" != 1 ]; then
    ti=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))')
    printf '#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>\nint main(){auto o=c10d::ProcessGroupGloo::Options::create();return o->threads;}\n' >/tmp/gloo_probe.cpp
    if g++ -std=gnu++17 -fsyntax-only -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -I"$deps/usr/include" -I"$deps/gloo-include" \
         -isystem "$ti" -isystem "$ti/torch/csrc/api/include" -isystem /usr/local/cuda/include /tmp/gloo_probe.cpp \
         >"$out/gloo_probe.log" 2>&1; then
      gloo_flag=(-DVOLT_GLOO_INCLUDE_DIR="$deps/gloo-include"); echo "gloo: Debian's headers fit"
    else
      echo "gloo: Debian's headers do not fit this LibTorch (see gloo_probe.log); NCCL only"
    fi
  fi
  # -I (searched before the -isystem dirs) makes Debian's fmt 9, which Debian's spdlog 1.10 needs,
  # win over the newer fmt the PyTorch wheel ships in torch/include.
  run cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CXX_FLAGS="-I$deps/usr/include" "${gloo_flag[@]}" \
    -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON -DVOLT_TEST_SOURCE_FILTER="${VOLT_GPU_TEST_SOURCES:-}" \
    >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
  # -k 0: a test file that fails to compile does not keep the bench from being built; the tests
  # are then skipped, the bench rows still run, and the script fails at the end.
  if ! run cmake --build "$bdir" -j"$(nproc)" --target "${targets[@]}" -- -k 0 >"$out/build.log" 2>&1; then
    grep -B2 -A12 "error" "$out/build.log" | head -150
    rc=1
    tests_built=0
    cmake --build "$bdir" --target volt_cli bench_gpu >>"$out/build.log" 2>&1 || exit 1
  fi
  [ "$dry" = 1 ] && cat "$out/configure.log" "$out/build.log"
  echo "build (${targets[*]}): $(( $(date +%s) - t0 )) s"
fi

if [[ $steps == *" test "* ]]; then
  # The whole suite by default, built against this LibTorch, each case in a process of its own
  # (ctest): the [cuda] cases first, one at a time, which see the GPU, then every other case, whose
  # process hides it (tests/gpu_visibility.h): the CPU cases check the CPU paths of this build, the
  # [cuda] ones the GPU's, and VOLT_TEST_REQUIRE_GPU makes a [cuda] case that finds no GPU fail
  # instead of passing empty. Logs append, so several runs can share OUTDIR.
  export VOLT_TEST_REQUIRE_GPU=1
  if [ "$tests_built" = 0 ]; then
    echo "gpu.sh: tests skipped: they did not build (build.log)"
  elif out_of_time tests; then
    rc=1
  elif [ -n "${VOLT_CATCH_FILTER:-}" ]; then
    run_in "$bdir/tests" timeout -k 10 "$(budget 900)" ./volt_tests "$VOLT_CATCH_FILTER" >>"$out/tests.log" 2>&1 || rc=1
    tail -n 25 "$out/tests.log"
  else
    # ctest's names of the [cuda] cases, as one regular expression.
    if [ "$dry" = 1 ]; then
      cuda_cases='^volt/(<the [cuda] cases>)$'
    else
      cuda_cases=$("$bdir/tests/volt_tests" --list-test-names-only "[cuda]" 2>/dev/null | grep -v '^$' |
        sed 's/[][\\.*^$+?(){}|]/\\&/g' | paste -sd'|' -)
      cuda_cases=${cuda_cases:+^volt/($cuda_cases)\$}
    fi
    if [ -z "$cuda_cases" ]; then
      echo "gpu.sh: volt_tests lists no [cuda] case (VOLT_GPU_TEST_SOURCES left them all out?)"
      rc=1
    else
      run_in "$bdir" timeout -k 10 "$(budget 900)" ctest --output-on-failure -j1 --timeout 300 -R "$cuda_cases" \
        >>"$out/ctest.log" 2>&1 || rc=1
      tail -n 5 "$out/ctest.log"
    fi
    if out_of_time ctest; then
      rc=1
    else
      # shellcheck disable=SC2086  # VOLT_CTEST_ARGS is a list of arguments (not -E: ctest keeps one)
      run_in "$bdir" timeout -k 10 "$(budget 1800)" ctest --output-on-failure -j"${VOLT_CTEST_JOBS:-8}" --timeout 300 \
        ${cuda_cases:+-E "$cuda_cases"} ${VOLT_CTEST_ARGS:-} >>"$out/ctest.log" 2>&1 || rc=1
      tail -n 25 "$out/ctest.log"
    fi
  fi
fi

if [[ $steps == *" bench "* ]]; then
  for v in ${VOLT_GPU_VARIANTS:-fsdp fsdp_ac ddp ddp+graph fsdp_offload fsdp_fp16}; do
    out_of_time "bench_gpu $v" && { rc=1; break; }
    # shellcheck disable=SC2086
    run timeout -k 10 "$(budget 300)" "$bdir/bench/bench_gpu" "$data/wikitext-2" "$out/bench.jsonl" "$v" ${VOLT_GPU_BENCH_ARGS:-} \
      ${VOLT_GPU_PROFILE:+--profile "$VOLT_GPU_PROFILE"} \
      >>"$out/bench.log" 2>&1 || { echo "bench_gpu $v failed:"; tail -5 "$out/bench.log"; rc=1; }
  done
fi

if [[ $steps == *" lightning "* ]]; then
  IFS=';' read -ra lightning_variants <<<"${VOLT_LIGHTNING_VARIANTS:---strategy fsdp --ac 0;--strategy fsdp --ac 1;--strategy fsdp --ac 0 --precision 16-mixed}"
  for v in "${lightning_variants[@]}"; do
    out_of_time "lightning $v" && { rc=1; break; }
    # shellcheck disable=SC2086
    run timeout -k 10 "$(budget 300)" python3 bench/gpu/lightning_fsdp.py "$data/lightning" "$out/bench.jsonl" $v ${VOLT_GPU_BENCH_ARGS:-} \
      >>"$out/lightning.log" 2>&1 || { echo "lightning $v failed:"; tail -5 "$out/lightning.log"; rc=1; }
  done
fi

# The LLM workload's 1 B Llama (configs/llm/1b.yaml's shape), for the llm and ops steps.
llm_hidden=2048 llm_heads=16 llm_kv_heads=8 llm_vocab=32000
llm_batch=${VOLT_LLM_BATCH:-8} llm_block=${VOLT_LLM_BLOCK:-2048}

if [[ $steps == *" llm "* ]]; then
  # On random tokens, volt and Lightning.
  shape="--hidden $llm_hidden --layers 16 --heads $llm_heads --kv_heads $llm_kv_heads --vocab $llm_vocab --batch $llm_batch --block $llm_block --steps ${VOLT_LLM_STEPS:-10} --warmup 3"
  for v in ${VOLT_LLM_VARIANTS:-fsdp}; do
    out_of_time "bench_gpu --llm 1 $v" && { rc=1; break; }
    # shellcheck disable=SC2086
    run timeout -k 10 "$(budget 300)" "$bdir/bench/bench_gpu" "$data/wikitext-2" "$out/bench.jsonl" "$v" --llm 1 \
      --ffn 8192 --tied 0 $shape ${VOLT_GPU_PROFILE:+--profile "$VOLT_GPU_PROFILE"} \
      >>"$out/bench.log" 2>&1 || { echo "bench_gpu --llm 1 $v failed:"; tail -5 "$out/bench.log"; rc=1; }
  done
  if out_of_time lightning_llm; then
    rc=1
  else
    # shellcheck disable=SC2086
    run timeout -k 10 "$(budget 300)" python3 bench/gpu/lightning_llm.py "$out/bench.jsonl" --intermediate 8192 --tie 0 \
      --rope_theta 500000 $shape >>"$out/lightning.log" 2>&1 || { echo "lightning_llm failed:"; tail -5 "$out/lightning.log"; rc=1; }
  fi
fi

if [[ $steps == *" ops "* ]]; then
  if out_of_time bench_llm_ops; then
    rc=1
  else
    run timeout -k 10 "$(budget 120)" "$bdir/bench/bench_llm_ops" --device cuda --dtype bf16 --batch "$llm_batch" \
      --block "$llm_block" --heads "$llm_heads" --kv_heads "$llm_kv_heads" --head_dim $((llm_hidden / llm_heads)) \
      --vocab "$llm_vocab" >"$out/llm_ops.md" 2>&1 ||
      { echo "bench_llm_ops failed:"; rc=1; }
    cat "$out/llm_ops.md"
  fi
fi

[ "$dry" = 1 ] && cat "$out"/bench.log "$out"/lightning.log 2>/dev/null
[ -f "$out/bench.jsonl" ] && [ "$dry" != 1 ] && python3 bench/gpu/table.py "$out/bench.jsonl" | tee "$out/table.md"
exit $rc
