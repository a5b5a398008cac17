#!/bin/bash
# The recorder on the real driver (it must never stall, hang or lose events): the async loop
# (cudaMallocAsync/cudaFreeAsync pairs, retaining pool) with and without record, 5 alternating runs
# each; 32 threads of cudaMalloc/cudaFree recorded (static and shared cudart), every event counted.
# Needs bin/record (go build -o bin/record ./cmd/record) carried; cc and nvcc on the machine.
set -x
O=$OUT; B=$PWD/bin; T=/tmp/rec; mkdir -p $T
nvcc -O2 -o $T/al bench/alloc_loop.cu || exit 1
nvcc -O2 -cudart shared -o $T/al_shared bench/alloc_loop.cu || exit 1
$B/record shim -o $T/shim.so || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2 3 4 5; do
  $T/al bench 200000 4096 | sed "s/^/plain $i /"
  $B/record --shim $T/shim.so -o $T/bench.arrow -- $T/al bench 200000 4096 2> $T/bench.err | sed "s/^/record $i /"
  grep -E "events from|not recorded|warning" $T/bench.err
done 2>&1 | tee $O/async.txt
for al in al al_shared; do
  for k in 1 2 3; do
    $B/record --shim $T/shim.so -o $T/threads.arrow -- $T/al threads 32 20000 2> $T/threads.err | sed "s/^/$al $k /"
    cat $T/threads.err
  done
  $T/$al threads 32 20000 | sed "s/^/$al plain /"
done 2>&1 | tee $O/threads.txt
$B/record --shim $T/shim.so -o $T/counts.arrow -- $T/al 300 50 2>&1 | tee $O/counts.txt
# Per-function counts and seq density of the last recordings (pyarrow is on the machine).
for f in $T/threads.arrow $T/counts.arrow $T/bench.arrow; do
python3 - "$f" <<'PY'
import sys, collections, pyarrow as pa
t = pa.ipc.open_file(sys.argv[1]).read_all()
seq = sorted(t.column("seq").to_pylist())
funcs = collections.Counter(str(f) for f in t.column("function").to_pylist())
print(sys.argv[1], "rows", t.num_rows, "seq dense", seq == list(range(seq[0], seq[0] + len(seq))),
      "lost", t.schema.metadata.get(b"allocscope.lost_events"), dict(funcs))
PY
done 2>&1 | tee $O/check.txt
