#!/usr/bin/env bash
# Builds volt and runs the whole test suite (the README's test command; CI calls it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
# As many tests at once as there are cores: much of the suite waits (for ranks to start, for the
# timeouts it checks), and the multi-process tests use their own ports, folders and namespaces.
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
