#!/bin/bash
# Records testdata/progs/loop.c, a cudaMalloc/cudaFree loop, on the fake CUDA runtime and driver of
# this directory: a trace of 2 × PAIRS events for timing analyze on a plain allocation loop
# (docs/benchmarks.md). Needs cc and Go; no GPU. Usage, from anywhere:
#   bash testdata/fakecuda/record_loop.sh OUT.arrow [PAIRS]   (default 5,000,000 pairs)
set -euo pipefail
out=$(realpath -m "$1")
pairs=${2:-5000000}
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1" testdata/fakecuda/driver.c -lpthread
ln -s libcuda.so.1 "$dir/libcuda.so"
cc -shared -fPIC -O2 -Wl,-soname,libcudart.so -Wl,-rpath,'$ORIGIN' -o "$dir/libcudart.so" \
  testdata/fakecuda/runtime.c -ldl -lpthread
cc -O2 -I testdata/fakecuda -o "$dir/loop" testdata/progs/loop.c -L "$dir" -lcudart -lcuda \
  -Wl,-rpath,'$ORIGIN' -ldl -lpthread
go build -o "$dir/record" ./cmd/record
LD_LIBRARY_PATH="$dir" "$dir/record" -q -o "$out" -- "$dir/loop" "$pairs"
