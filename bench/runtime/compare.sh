#!/usr/bin/env bash
# Before/after decode throughput in one run: builds the runtime of git ref BASE (default: the last commit)
# in a temporary worktree, links the current bench_runtime.c against both runtimes, and runs them
# alternately (REPEAT times each, default 2) for every setting. Prints the runs' Markdown tables.
#
#   bench/runtime/compare.sh [--base REF] [--repeat N] [--cpus LIST] -- [bench-runtime arguments...]
#   e.g. bench/runtime/compare.sh --cpus 0,1 -- --threads 2 --prompt 512 --steps 32 --reps 5
#
# --cpus pins both runs to those cores (taskset). Needs git, cmake, a C compiler; touches neither the
# working tree nor the index (the worktree lives under a temporary directory and is removed at exit).
set -euo pipefail
base=HEAD repeat=2 cpus=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--base REF] [--repeat N] [--cpus LIST] -- [bench-runtime args]" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/mmgw-compare.XXXXXX)
cleanup() { git -C "$src" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
git -C "$src" worktree add --detach "$tmp/base" "$base" >/dev/null
build() { # $1 source tree, $2 build dir, $3 output binary
  cmake -S "$1" -B "$2" -DMMGW_CUDA=OFF -DMMGW_RUNTIME_ONLY=ON -DMMGW_BUILD_TESTS=OFF -DMMGW_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$2" -j2 --target wk_runtime mk_demo >/dev/null
  cc -O2 -std=gnu17 -D_GNU_SOURCE -I"$1/worker" -I"$1/worker/runtime" -I"$1/common" -I"$1/tools/mkdemo" \
    "$src/bench/runtime/bench_runtime.c" -o "$3" "$2/lib/libwk_runtime.a" "$2/lib/libmk_demo.a" \
    "$2/lib/libkn_cpu.a" "$2/lib/libmmgw_common.a" $(pkg-config --libs jansson openblas) -lpthread -lm
}
build "$tmp/base" "$tmp/build-base" "$tmp/bench-before"
build "$src" "$tmp/build-now" "$tmp/bench-after"
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")
for i in $(seq "$repeat"); do
  for which in before after; do
    echo "### $which ($([ $which = before ] && git -C "$src" rev-parse --short "$base" || echo 'working tree')), run $i: $*"
    "${pin[@]}" "$tmp/bench-$which" "$@" 2>&1 | grep -v ' info '
  done
done
