#!/bin/bash
# record --pool on the H200: the nvcc alloc loop (static and shared cudart) with and without the pool,
# 3 alternating runs each, and 32 threads of cudaMalloc/cudaFree on the pool. Needs bin/record.
set -x
T=/tmp/rp; mkdir -p $T; B=$PWD/bin
nvcc -O2 -o $T/al bench/alloc_loop.cu || exit 1
nvcc -O2 -cudart shared -o $T/als bench/alloc_loop.cu || exit 1
$B/record shim -o $T/shim.so || exit 1
P=testdata/h200/a_static.pool.json
for al in al als; do
  for k in 1 2 3; do
    $B/record --shim $T/shim.so -o $T/plain.arrow -- $T/$al 300 50 2>&1 | sed "s/^/$al plain $k: /"
    $B/record --shim $T/shim.so --pool $P -o $T/pool.arrow -- $T/$al 300 50 2>&1 | sed "s/^/$al pool $k: /"
  done
  $B/record --shim $T/shim.so --pool $P -o $T/pool_threads.arrow -- $T/$al threads 32 2000 2>&1 | sed "s/^/$al pool threads: /"
done
