#!/usr/bin/env bash
# Builds volt and runs the main job: FSDP training of the demo Transformer on WikiText-2, across 2
# CPU processes, with the shipped offline data. Extra arguments are passed on as config overrides,
# e.g. scripts/run-demo.sh --trainer.max_steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target volt_cli
exec build/volt fit --config configs/default.yaml "$@"
