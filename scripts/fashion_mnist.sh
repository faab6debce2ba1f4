#!/usr/bin/env bash
# Converts Debian's Fashion-MNIST (package dataset-fashion-mnist) into the Batchcast layout:
#   OUTDIR/fashion-mnist-train.h5      60000 samples, raw 28x28x1 uint8 (gzip chunks)
#   OUTDIR/fashion-mnist-test.h5       10000 samples, raw
#   OUTDIR/fashion-mnist-train-png.h5  60000 samples, PNG-encoded
# Files that already exist are kept (conversion is atomic, so an existing file is complete).
# Usage: scripts/fashion_mnist.sh OUTDIR [BATCHCAST_BINARY]
set -euo pipefail
out=${1:?usage: scripts/fashion_mnist.sh OUTDIR [BATCHCAST_BINARY]}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-${BATCHCAST_BIN:-}}
if [ -z "$bin" ]; then
  for b in "$here/build/bin/batchcast" "$here"/build*/bin/batchcast; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "fashion_mnist.sh: no batchcast binary (build first, or pass it)" >&2; exit 1; }
src=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$src/train-images-idx3-ubyte.gz" ] || {
  echo "fashion_mnist.sh: $src/train-images-idx3-ubyte.gz is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
mkdir -p "$out"

convert() {  # split target encode
  local split=$1 target=$2 encode=$3
  if [ -e "$target" ]; then echo "fashion_mnist.sh: $target exists, kept"; return; fi
  "$bin" convert idx --images "$src/$split-images-idx3-ubyte.gz" --labels "$src/$split-labels-idx1-ubyte.gz" \
    --out "$target" --encode "$encode" --fashion-mnist-classes
}
convert train "$out/fashion-mnist-train.h5" raw
convert t10k "$out/fashion-mnist-test.h5" raw
convert train "$out/fashion-mnist-train-png.h5" png
