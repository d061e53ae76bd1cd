#!/usr/bin/env bash
# Fail when a tracked C/CUDA source differs from clang-format's output (root .clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r f; do
  if ! diff -q <(clang-format --style=file "$f") "$f" >/dev/null; then
    echo "not clang-formatted: $f"
    bad=1
  fi
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
exit $bad
