#!/bin/sh
# Tokenizer benchmark with its baseline in the same run. usage: run_bench.sh BUILD_DIR [CORPUS_BYTES]
# Tokenizers: the tiny M3 tokenizer from ../shared/testdata (8,199 ids) when present, the demo tokenizer
# from mmgw-mktokenizer, and a synthetic 200,064-id tokenizer (merges learned from the corpus, padded
# with synthetic ones to M3's size). Baseline: bench_ref.py (pure Python reference) on 1 MB of the corpus.
set -eu
build=${1:?usage: run_bench.sh BUILD_DIR [CORPUS_BYTES]}
bytes=${2:-4194304}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$here/make_corpus.sh" "$work/corpus.txt" "$bytes" >/dev/null
head -c 1000000 "$work/corpus.txt" >"$work/corpus1m.txt"
"$build/bin/mmgw-mktokenizer" --out "$work/demo.json" >/dev/null
"$build/bin/mmgw-mktokenizer" --out "$work/big.json" --corpus "$work/corpus.txt" --merges 199744 --pad >/dev/null 2>&1
data=${MMGW_TESTDATA:-$here/../../../shared/testdata}
set -- demo "$work/demo.json" big200k "$work/big.json"
[ -f "$data/m3-tiny-a/tokenizer.json" ] && set -- tiny "$data/m3-tiny-a/tokenizer.json" "$@"
nproc_=$(nproc)
while [ $# -gt 0 ]; do
    name=$1 tok=$2
    shift 2
    echo "== $name: C ($(wc -c <"$work/corpus.txt") bytes)"
    "$build/bin/bench_tokenizer" "$tok" "$work/corpus.txt" "$nproc_"
    echo "== $name: C on the baseline's 1 MB"
    "$build/bin/bench_tokenizer" "$tok" "$work/corpus1m.txt" 1 | grep -E "tokens|ids_fnv|encode_"
    echo "== $name: Python reference (baseline) on 1 MB"
    /usr/bin/python3 "$here/bench_ref.py" "$tok" "$work/corpus1m.txt"
done
