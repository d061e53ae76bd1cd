#!/usr/bin/env bash
# Before/after decode throughput in one run: builds the runtime of git ref BASE (default: the last commit)
# from `git archive` in a temporary directory, links the current bench sources against both runtimes, and
# runs them alternately (REPEAT times each, default 2) for every setting. Prints the runs' Markdown tables.
#
#   bench/runtime/compare.sh [--base REF] [--repeat N] [--cpus LIST] [--bench NAME] -- [bench arguments...]
#   bench/runtime/compare.sh --out DIR [--base REF]
#   e.g. bench/runtime/compare.sh --cpus 0,1 -- --threads 2 --prompt 512 --steps 32 --reps 5
#
# --bench picks bench-runtime (default) or bench-decode. --cpus pins both runs to those cores (taskset).
# --out DIR builds static, stripped binaries DIR/{bench-runtime,bench-decode}-{before,after} and stops: to
# run on another machine of the same architecture (nothing else needs to be installed there).
# Needs git, cmake, a C compiler; touches neither the working tree nor git's index, refs or worktrees.
set -euo pipefail
base=HEAD repeat=2 cpus="" bench=bench-runtime out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--base REF] [--repeat N] [--cpus LIST] [--bench NAME] [--out DIR] -- [bench args]" >&2
       exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/mmgw-compare.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$src" archive "$base" | tar -x -C "$tmp/base"
static=()
libs="$(pkg-config --libs jansson openblas) -lpthread -lm"
if [ -n "$out" ]; then
  static=(-static -s)
  libs="-ljansson -lopenblas -lgfortran -lquadmath -lpthread -lm"
fi
build() { # $1 source tree, $2 build dir, $3 suffix of the output binaries
  cmake -S "$1" -B "$2" -DMMGW_CUDA=OFF -DMMGW_RUNTIME_ONLY=ON -DMMGW_BUILD_TESTS=OFF -DMMGW_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$2" -j2 --target wk_runtime mk_demo >/dev/null
  for b in bench_runtime bench_decode; do
    cc -O2 -std=gnu17 -D_GNU_SOURCE -I"$1/worker" -I"$1/worker/runtime" -I"$1/common" -I"$1/tools/mkdemo" \
      "${static[@]}" "$src/bench/runtime/$b.c" -o "$tmp/${b/_/-}-$3" "$2/lib/libwk_runtime.a" \
      "$2/lib/libmk_demo.a" "$2/lib/libkn_cpu.a" "$2/lib/libmmgw_common.a" $libs
  done
}
build "$tmp/base" "$tmp/build-base" before
build "$src" "$tmp/build-now" after
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$tmp"/bench-*-before "$tmp"/bench-*-after "$out"/
  echo "static binaries in $out (before = $(git -C "$src" rev-parse --short "$base"), after = working tree)"
  exit 0
fi
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")
for i in $(seq "$repeat"); do
  for which in before after; do
    echo "### $which ($([ $which = before ] && git -C "$src" rev-parse --short "$base" || echo 'working tree')), run $i: $*"
    "${pin[@]}" "$tmp/$bench-$which" "$@" 2>&1 | grep -v ' info '
  done
done
