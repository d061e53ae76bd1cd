#!/usr/bin/env bash
# Prepare .carry/ (git-ignored) for bench/cuda/device_run.sh on the GPU machine: libjansson extracted from the
# Debian packages (the machine has no package registry), a snapshot of the components the CUDA build takes
# from other engineers (kernels/cpu, worker/, tools/mkdemo: a known-good state while they are mid-edit), and
# the tiny checkpoint with its goldens (../shared does not travel). Run from the repository root.
set -euo pipefail
mkdir -p .carry/debs
(cd .carry/debs && apt-get download libjansson4 libjansson-dev >/dev/null)
rm -rf .carry/debroot
for f in .carry/debs/*.deb; do dpkg -x "$f" .carry/debroot; done
rm -rf .carry/snap
mkdir -p .carry/snap/kernels .carry/snap/worker .carry/snap/tools
cp -r kernels/cpu .carry/snap/kernels/
cp worker/wk_engine.h .carry/snap/worker/
cp -r worker/runtime worker/run .carry/snap/worker/
cp -r tools/mkdemo tools/quantize .carry/snap/tools/
if [ -d ../shared/testdata/m3-tiny-a ]; then
    mkdir -p .carry/testdata
    rm -rf .carry/testdata/m3-tiny-a
    cp -r ../shared/testdata/m3-tiny-a .carry/testdata/
fi
du -sh .carry
