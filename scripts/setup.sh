#!/usr/bin/env bash
# Install the Debian 12 packages mmgw needs (only the missing ones) and build it into build/.
# Usage: scripts/setup.sh            (extra CMake arguments via MMGW_CMAKE_ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."

# Build dependencies, then what the tests use as real clients and peers (python3-grpcio, curl, nghttp...).
PKGS=(
  build-essential cmake pkg-config git ca-certificates clang-format
  libjansson-dev libopenblas-dev
  libevent-dev libnghttp2-dev libssl-dev libcurl4-openssl-dev libpcre2-dev libutf8proc-dev libxxhash-dev
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler protobuf-compiler-grpc
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libvips-dev libjpeg62-turbo-dev libdeflate-dev libpng-dev libtiff-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-pil python3-regex curl nghttp2-client openssl ffmpeg
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${MMGW_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built into $(pwd)/build (executables in build/bin, plugins in build/plugins)"
