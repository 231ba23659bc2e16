#!/usr/bin/env bash
# Compiles the given source files for syntax and types only (no object, no link), with the test
# target's flags from an existing build/ tree: a quick check while another build runs.
# usage: scripts/check-syntax.sh FILE.cpp [FILE.cpp ...]
set -euo pipefail
cd "$(dirname "$0")/.."
flags=build/tests/CMakeFiles/volt_tests.dir/flags.make
[ -f "$flags" ] || { echo "check-syntax: configure build/ first (cmake -S . -B build)"; exit 2; }
get() { sed -n "s/^$1 = //p" "$flags"; }
rc=0
for f in "$@"; do
  eval "nice g++ $(get CXX_DEFINES) $(get CXX_INCLUDES) -I/usr/include/catch2 $(get CXX_FLAGS) -Wall -Wno-unused-parameter -Wno-sign-compare -fsyntax-only \"$f\"" || rc=1
done
exit $rc
