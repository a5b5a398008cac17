#!/bin/bash
# The C pool of record --pool in replay on the GPU (docs/replay.md, docs/benchmarks.md): each trace
# against its pool.json (analyze --arena fixed), 10 interleaved repetitions of raw cuMemAlloc/cuMemFree,
# the Go pool, the C pool and the stream-ordered pool. Needs bin/replay-cuda and bin/pool/*.pool.json
# (bench/build_bin.sh); TRACES names fewer traces. Writes $OUT/replay_cpool/*.txt and *.json.
: "${OUT:?set OUT to an output folder}"
O=$OUT/replay_cpool; mkdir -p "$O"
for t in ${TRACES:-pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache}; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=internal/cli/analyze/bundled/pytorch-train.arrow
  cfg=bin/pool/$t.pool.json; [ -f bin/pool/$t.fixed.pool.json ] && cfg=bin/pool/$t.fixed.pool.json
  timeout 120 bin/replay-cuda "$tr" --config "$cfg" --modes raw,pool,cpool,async --repeat 10 \
    > "$O/$t.txt" 2>&1; echo "$t rc=$?"
  timeout 120 bin/replay-cuda "$tr" --config "$cfg" --modes raw,pool,cpool,async --repeat 10 --json \
    > "$O/$t.json" 2> "$O/$t.err"
  grep -E "^ +(raw|pool|cpool|async) +[0-9.]+ (ms|us|ns|s) |speedup|FAIL" "$O/$t.txt"
done
