#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run every test: the full suite on the normal build, the unit tests again
# on an ASan+UBSan build, and the formatting check. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

jobs=$(nproc)
echo "== tests (build/)"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900

echo "== unit tests under ASan+UBSan (build-asan/)"
cmake -S . -B build-asan -DMMGW_SANITIZE=address,undefined -DMMGW_CUDA=OFF -DMMGW_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j"$jobs" --timeout 900

echo "== formatting"
scripts/check-format.sh
echo "all tests passed"
