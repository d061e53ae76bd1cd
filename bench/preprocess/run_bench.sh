#!/usr/bin/env bash
# Benchmark mmgw-preprocess against the Pillow + NumPy baseline (baseline_pillow.py), single thread, same
# machine, same run. Generates its inputs (from ../shared/testdata when present, else FFmpeg test sources),
# prints a Markdown table. Other work on the machine skews numbers: run it when quiet; each figure is the best
# of ROUNDS runs.
#
# usage: bench/preprocess/run_bench.sh [BUILD_DIR]        (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/bin/mmgw-preprocess
PY=/usr/bin/python3
BASE=bench/preprocess/baseline_pillow.py
DATA=${MMGW_TESTDATA:-../shared/testdata}
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build $BUILD --target mmgw-preprocess)"; exit 1; }

ff() { ffmpeg -loglevel error -y "$@"; }
# inputs
if [ -f "$DATA/media/coffee.jpg" ]; then
  ff -i "$DATA/media/coffee.jpg" -vf scale=640:427:flags=lanczos -q:v 2 "$W/img_640x427.jpg"; SRC640="coffee.jpg scaled"
else
  ff -f lavfi -i mandelbrot=size=640x427 -frames:v 1 -q:v 2 "$W/img_640x427.jpg"; SRC640="FFmpeg mandelbrot"
fi
if [ -f "$DATA/media/astronaut.png" ]; then
  cp "$DATA/media/astronaut.png" "$W/img_512x512.png"; SRC512="astronaut.png"
else
  ff -f lavfi -i mandelbrot=size=512x512 -frames:v 1 "$W/img_512x512.png"; SRC512="FFmpeg mandelbrot"
fi
ff -f lavfi -i mandelbrot=size=3000x2000 -frames:v 1 -q:v 2 "$W/img_3000x2000.jpg"
if [ -f "$DATA/media/pan_640x360_30fps.mp4" ]; then
  cp "$DATA/media/pan_640x360_30fps.mp4" "$W/clip_640x360_4s.mp4"; SRCV="pan_640x360_30fps.mp4"
else
  ff -f lavfi -i testsrc2=size=640x360:rate=30 -t 4 -c:v libx264 -pix_fmt yuv420p "$W/clip_640x360_4s.mp4"; SRCV="FFmpeg testsrc2"
fi

best() { sort -g | tail -1; }
ours() { # kind file repeat [threads] [extra flag] -> items/s (best of ROUNDS); the split of the last run in $W/split
  local t=${4:-1} r out
  for r in $(seq "$ROUNDS"); do
    out=$("$BIN" --plugin m3 "--$1" "$2" --out "$W/o.st" --quiet --repeat "$3" --threads "$t" ${5:-} 2>&1 >/dev/null)
    echo "$out" | grep '^per item' > "$W/split"
    echo "$out" | sed -n 's/^throughput: \([0-9.]*\) items\/s$/\1/p'
  done | best
}
base() { # kind file repeat -> items/s (best of ROUNDS); split in $W/bsplit
  local r out
  for r in $(seq "$ROUNDS"); do
    out=$($PY $BASE "$1" "$2" "$3")
    echo "$out" | grep decode_ms > "$W/bsplit" || true
    echo "$out" | sed -n 's/^items\/s //p'
  done | best
}
split() { sed -n 's/.*decode \([0-9.]*\) ms, resize+normalize+patch \([0-9.]*\) ms.*/\1 \/ \2/p' "$W/split"; }

echo "| input | Pillow+NumPy items/s | mmgw items/s | speed-up | target | mmgw decode / post-decode ms |"
echo "|---|---|---|---|---|---|"
row() { # label kind file repeat_ours repeat_base target
  local b o
  b=$(base "$2" "$3" "$5")
  o=$(ours "$2" "$3" "$4")
  printf "| %s | %s | %s | %.1fx | >= %sx | %s |\n" "$1" "$b" "$o" "$(echo "$o / $b" | bc -l)" "$6" "$(split)"
  if [ -s "$W/bsplit" ]; then echo "|  | (Pillow: $(cat "$W/bsplit")) | | | | |"; fi
  : > "$W/bsplit"
}
row "640x427 JPEG ($SRC640)" image "$W/img_640x427.jpg" 400 100 5
row "512x512 PNG ($SRC512)" image "$W/img_512x512.png" 100 40 3
row "3000x2000 JPEG (mandelbrot)" image "$W/img_3000x2000.jpg" 30 10 3
row "4 s 640x360 H.264 video, M3 rule ($SRCV)" video "$W/clip_640x360_4s.mp4" 20 5 5

echo
echo "Opt-in, not bit-exact: 3000x2000 JPEG with --fast-jpeg (DCT-domain 1/2 decode): $(ours image "$W/img_3000x2000.jpg" 30 1 --fast-jpeg) items/s, decode / post-decode $(split) ms; bf16 output on the 640x427 JPEG: $(ours image "$W/img_640x427.jpg" 400 1 "--dtype bf16") items/s, $(split) ms"
echo
echo "Thread scaling (640x427 JPEG, items/s):"
for t in 1 2 4; do echo "- $t thread(s): $(ours image "$W/img_640x427.jpg" 800 "$t")"; done
echo
rss=$( { /usr/bin/time -f %M "$BIN" --plugin m3 --image "$W/img_3000x2000.jpg" --out "$W/o.st" --quiet; } 2>&1 | tail -1)
base_rss=$( { /usr/bin/time -f %M "$BIN" --plugin m3 --image "$W/img_640x427.jpg" --out "$W/o.st" --quiet; } 2>&1 | tail -1)
echo "Peak RSS, 3000x2000 JPEG: ${rss} KiB (decoded RGB: $((3000 * 2000 * 3 / 1024)) KiB; ratio $(echo "scale=2; $rss / (3000*2000*3/1024)" | bc)); the same binary on the 640x427 JPEG: ${base_rss} KiB"
echo
echo "AVX2 kernels: $(grep -q avx2 /proc/cpuinfo && echo yes || echo no); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(nproc) cores"
