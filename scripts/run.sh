#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: a CPU worker on a demo checkpoint and the gateway in
# front of it on 127.0.0.1:8080 (conf/mmgw.conf). The demo checkpoint (random weights in MiniMax-M3's
# released format) and its byte-level tokenizer are generated under demo/ on first run; a sample image and
# video are made there too and run through the preprocessing pipeline. Ctrl-C stops both processes.
#
# To serve a real M3 instead: point `tokenizer` in conf/mmgw.conf at its tokenizer.json and start
# `build/bin/mmgw-worker --model /path/to/MiniMax-M3 --listen 127.0.0.1:50051` on the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

DEMO=demo
BIN=build/bin
mkdir -p "$DEMO"
if [ ! -f "$DEMO/model/config.json" ]; then
  echo "run: generating the demo tokenizer and checkpoint under $DEMO/"
  "$BIN/mmgw-mktokenizer" --out "$DEMO/tokenizer.json"
  "$BIN/mmgw-mkdemo" --tokenizer "$DEMO/tokenizer.json" --out "$DEMO/model"
fi
if [ ! -f "$DEMO/sample.mp4" ]; then
  # FFmpeg's test sources: a 640x427 still and a 4 s 640x360 H.264 clip
  ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=640x427 -frames:v 1 "$DEMO/sample.png"
  ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=640x360:rate=30 -t 4 -c:v libx264 -pix_fmt yuv420p \
    "$DEMO/sample.mp4" 2>/dev/null ||
    ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=640x360:rate=30 -t 4 -pix_fmt yuv420p "$DEMO/sample.mp4"
fi

echo "run: preprocessing the samples (M3 rules)"
"$BIN/mmgw-preprocess" --plugin m3 --image "$DEMO/sample.png" --video "$DEMO/sample.mp4" \
  --out "$DEMO/sample.safetensors"

# A chat request with the sample image inline as a data: URL.
{
  printf '{"model":"m3-tiny","max_tokens":32,"messages":[{"role":"user","content":['
  printf '{"type":"text","text":"What is in this picture?"},'
  printf '{"type":"image_url","image_url":{"url":"data:image/png;base64,'
  base64 -w0 "$DEMO/sample.png"
  printf '"}}]}]}\n'
} >"$DEMO/request.json"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$BIN/mmgw-worker" --model "$DEMO/model" --listen 127.0.0.1:50051 &
pids+=($!)
"$BIN/mmgw" -c conf/mmgw.conf &
pids+=($!)

for _ in $(seq 1 100); do
  if curl -sf http://127.0.0.1:8080/health >/dev/null 2>&1; then break; fi
  sleep 0.2
done
curl -sf http://127.0.0.1:8080/health >/dev/null || { echo "run: the gateway did not come up" >&2; exit 1; }

cat <<EOT

mmgw is serving the demo model on http://127.0.0.1:8080 (the demo's words are random; the pipeline is real).
Try it (a chat with the sample image):

  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' -d @$DEMO/request.json

or stream a text chat:

  curl -sN http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"m3-tiny","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}'

or ask about the sample video by a file: URL (read beneath allowed_local_media_path, conf/mmgw.conf):

  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"m3-tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"video_url",
        "video_url":{"url":"file://$PWD/$DEMO/sample.mp4"}},{"type":"text","text":"What happens?"}]}]}'

Ctrl-C stops the gateway and the worker.
EOT
wait -n "${pids[@]}"
