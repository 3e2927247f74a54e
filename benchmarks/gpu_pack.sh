#!/usr/bin/env bash
# Pack what benchmarks/gpu_check.sh needs on a GPU machine with no network into .gpu/ (git-ignored), on a machine
# with one: the six packages' wheels, the manifest of the sources they are built from (.gpu/sources.sha256, by
# benchmarks/pack_sources.py: gpu_check.sh refuses a pack whose sources differ from the tree's), click (gpt-train
# needs 8.2 or later; the machine's may be older), and, given a clone of karpathy/nanoGPT and tinyshakespeare.txt,
# a copy of the clone with data/shakespeare_char prepared. Pack again after any change to the packages' sources.
#
#   bash benchmarks/gpu_pack.sh                                   # the wheels alone: the steps not against nanoGPT
#   bash benchmarks/gpu_pack.sh ~/nanoGPT tinyshakespeare.txt     # and nanoGPT with its data: every step
#
# Then, on the GPU machine, from the repository's root (with .gpu/ carried along):
#   bash benchmarks/gpu_check.sh
set -euo pipefail
PYTHON=${PYTHON:-python3}
PACK=.gpu
rm -rf "$PACK" && mkdir -p "$PACK/wheels"
$PYTHON benchmarks/pack_sources.py write "$PACK/sources.sha256"  # the sources as the wheels are built from them
$PYTHON -m pip wheel -q --no-deps -w "$PACK/wheels" packages/gpt-* examples/gpt-*
rm -rf packages/*/build examples/*/build  # setuptools' leftovers beside the sources
$PYTHON -m pip download -q --no-deps --only-binary=:all: -d "$PACK/wheels" "click>=8.2"
if [ $# -ge 2 ]; then
  mkdir -p "$PACK/nanoGPT"
  git -C "$1" archive HEAD model.py train.py configurator.py config data/shakespeare_char | tar -x -C "$PACK/nanoGPT"
  cp "$2" "$PACK/tinyshakespeare.txt"
  cp "$2" "$PACK/nanoGPT/data/shakespeare_char/input.txt"
  (cd "$PACK/nanoGPT/data/shakespeare_char" && $PYTHON prepare.py > /dev/null)  # train.bin, val.bin, meta.pkl
fi
du -sh "$PACK"
