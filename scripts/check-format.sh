#!/usr/bin/env bash
# Checks that every C++ file of the project (*.h, *.cpp known to git: tracked, or new and not
# ignored; build folders excluded) is formatted as .clang-format says, with Debian's clang-format.
# Prints the files that are not and exits 1 if any; changes nothing.
# usage: scripts/check-format.sh [FILE ...]    (default: all of them)
#   CLANG_FORMAT=/path/to/clang-format   another binary (other versions format differently)
#   VERBOSE=1                            also print clang-format's findings for each file
# Exits 77 (CTest's "skipped") when clang-format is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
cf="${CLANG_FORMAT:-clang-format}"
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "check-format: $cf is not installed (Debian: apt-get install clang-format); skipping"
  exit 77
fi
if [ $# -gt 0 ]; then
  files=("$@")
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' | grep -v '^build' |
                       while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
  mapfile -t files < <(find . -path './build*' -prune -o -path './.git' -prune -o \
                            -type f \( -name '*.h' -o -name '*.cpp' \) -print | sed 's|^\./||' | sort)
fi
bad=()
for f in "${files[@]}"; do
  if ! out=$("$cf" --style=file --dry-run --Werror "$f" 2>&1); then
    bad+=("$f")
    [ "${VERBOSE:-0}" = 1 ] && echo "$out"
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted ($("$cf" --version | head -1)):"
  printf '  %s\n' "${bad[@]}"
  echo "check-format: fix with: $cf -i <files>"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
