#!/bin/bash
# record --pool's bars on the GPU machine (docs/record-pool.md): for each program, a recording
# without the pool, analyze's pool.json from it, then RUNS alternating recordings without and with
# the pool; the outputs must be identical, and analyze --compare says what the pool changed.
# Programs: the nvcc checksum loop (static cudart), PyTorch with PYTORCH_NO_CUDA_MEMORY_CACHING=1
# (deterministic), CuPy with its pool off, CuPy on cudaMallocAsync with two streams, and the nvcc
# loop's stream-ordered pairs on a stream of their own beside cudaMalloc (alloc_loop 300 3000), a
# small GPT trainer and a batched generator with a growing KV cache (torch_pool.py gpt, generate;
# caching off) and 8 threads on four kinds of stream in an order that varies (mt_streams.cu). Needs bin/record, bin/analyze (bench/build_bin.sh).
# HEADROOM (default 8) is analyze's --pool-headroom; ONLY (e.g. "torch_mlp cupy") runs only the programs
# named; STEPS (training steps, default the workload's) and ARRAYS (CuPy, default 2000) make runs longer. Writes everything under OUT (default /tmp/pool_bars).
set -u
OUT=${OUT:-/tmp/pool_bars}; RUNS=${RUNS:-3}; HEADROOM=${HEADROOM:-8}; mkdir -p "$OUT"; B=$PWD/bin
nvcc -O2 -o "$OUT/alloc_loop" bench/alloc_loop.cu || exit 1
nvcc -O2 -o "$OUT/mt_streams" bench/mt_streams.cu || echo "mt_streams: nvcc failed"
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTORCH_NO_CUDA_MEMORY_CACHING=1
nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$OUT/mem_before.txt"

# bars NAME HEADROOM COMMAND...: the recordings and comparisons of one program.
bars() {
  local name=$1 headroom=$2; shift 2
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && return
  "$B/record" -q --shim "$B/liballocscope.so" -o "$OUT/$name.plan.arrow" -- "$@" > "$OUT/$name.plan.out" 2>&1
  "$B/analyze" --quiet --arena fixed --pool-headroom "$headroom" --emit-config "$OUT/$name.pool.json" \
    "$OUT/$name.plan.arrow" || return
  for k in $(seq "$RUNS"); do
    for mode in plain pool; do
      local flags=(); [ $mode = pool ] && flags=(--pool "$OUT/$name.pool.json")
      local t0=$(date +%s%N)
      "$B/record" --shim "$B/liballocscope.so" "${flags[@]}" -o "$OUT/$name.$mode$k.arrow" -- "$@" \
        > "$OUT/$name.$mode$k.out" 2> "$OUT/$name.$mode$k.err"
      echo "$name $mode $k exit $? wall_ms $(( ($(date +%s%N) - t0) / 1000000 ))"
    done
    cmp -s "$OUT/$name.plain$k.out" "$OUT/$name.pool$k.out" && echo "$name $k outputs identical" \
      || echo "$name $k OUTPUTS DIFFER"
    "$B/analyze" --compare "$OUT/$name.plain$k.arrow" "$OUT/$name.pool$k.arrow" > "$OUT/$name.compare$k.txt"
    "$B/analyze" --compare --json "$OUT/$name.plain$k.arrow" "$OUT/$name.pool$k.arrow" > "$OUT/$name.compare$k.json"
  done
  python3 - "$OUT/$name.pool.json" "$OUT"/$name.compare*.json <<'PY'
import json, sys
pred = json.load(open(sys.argv[1]))["prediction"]
print(sys.argv[1], "prediction: replay peak", pred["peak_reserved_bytes"], "record --pool", pred.get("record_pool"))
for f in sys.argv[2:]:
    c = json.load(open(f))
    b, a = c["before"], c["after"]
    ratio = b["request_call_ns"] / max(a["request_call_ns"], 1)
    print(f, "requests", b["requests"], a["requests"], "inside ns", b["request_call_ns"], a["request_call_ns"],
          "ratio %.1f" % ratio, "wall ns", b["wall_ns"], a["wall_ns"], "served", a["pool_served"], "pool", a.get("pool"))
PY
}

bars nvcc_loop_h1 1 "$OUT/alloc_loop" checksum 3000
bars nvcc_loop "$HEADROOM" "$OUT/alloc_loop" checksum 3000
bars nvcc_loop_h64 64 "$OUT/alloc_loop" checksum 3000
bars torch_mlp "$HEADROOM" python3 bench/torch_pool.py mlp ${STEPS:-}
bars torch_cnn "$HEADROOM" python3 bench/torch_pool.py cnn ${STEPS:-}
bars cupy "$HEADROOM" python3 bench/cupy_pool.py ${ARRAYS:-2000}
bars cupy_streams "$HEADROOM" python3 bench/cupy_streams.py ${ARRAYS:-2000}
bars nvcc_async "$HEADROOM" "$OUT/alloc_loop" 300 3000
bars torch_gpt "$HEADROOM" python3 bench/torch_pool.py gpt ${STEPS:-}
bars torch_generate "$HEADROOM" python3 bench/torch_pool.py generate ${STEPS:-}
bars mt_streams "$HEADROOM" "$OUT/mt_streams" ${ROUNDS:-150} ${THREADS:-8}
nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$OUT/mem_after.txt"
rm -f "$OUT"/*.arrow.tmp
for f in "$OUT"/*.compare1.txt; do echo "== $f"; cat "$f"; done
echo "memory used before/after: $(cat "$OUT/mem_before.txt") / $(cat "$OUT/mem_after.txt")"
