#!/bin/sh
# Build an English-prose corpus from text every Debian system has (licence texts and package copyright
# files, duplicates removed), capped at $2 bytes (default 4 MiB). Usage: make_corpus.sh OUT [BYTES]
set -eu
out=$1
max=${2:-4194304}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in /usr/share/common-licenses/* /usr/share/doc/*/copyright; do
    [ -f "$f" ] || continue
    sum=$(md5sum <"$f" | cut -c1-32)
    [ -e "$tmp/$sum" ] && continue
    : >"$tmp/$sum"
    cat "$f"
done | head -c "$max" >"$out"
echo "$out: $(wc -c <"$out") bytes"
