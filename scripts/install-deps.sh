#!/usr/bin/env bash
# Installs the Debian packages volt builds and tests with. Idempotent: does nothing when all are
# present. Needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(build-essential cmake libtorch-dev libgloo-dev libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 clang-format
      libcurl4-openssl-dev nlohmann-json3-dev)
# TensorBoard's event files are protocol buffers: the library and its compiler for the vendored
# .proto files (loggers/proto).
pkgs+=(libprotobuf-dev protobuf-compiler)
# The LLM demo's tokenizer (demos/llm/) and the checkpoint checksums (XXH64).
pkgs+=(pkg-config libsentencepiece-dev libxxhash-dev)
# Debian's LibTorch calls the system BLAS (libblas.so.3), which is the single-threaded netlib
# reference unless an optimized one is installed. OpenBLAS (OpenMP build, so it follows
# torch::set_num_threads like the rest of ATen) takes over that alternative and makes the CPU
# matmuls several times faster.
pkgs+=(libopenblas0-openmp)
# Python PyTorch (Debian's 1.13) regenerates golden values and reads checkpoints in interop tests.
[ "${VOLT_WITH_PYTHON:-1}" = 1 ] && pkgs+=(python3-torch python3-sentencepiece)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
