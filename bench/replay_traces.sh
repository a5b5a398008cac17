#!/bin/bash
# Replays the six recorded traces on the GPU against the pool.json analyze recommends for each
# (docs/benchmarks.md, "The six traces on the H200"): the CUDA backend's tests, then per trace 20
# timed repetitions of raw cudaMalloc/cudaFree, the pool and the stream-ordered pool, interleaved
# (JSON report), and one repetition with --verify --touch. EXPANDABLE=1 also replays PyTorch's
# expandable segments on the bundled and KV-cache traces.
# Run from the repository root with OUT set to an output folder; needs bin/replay-cuda,
# bin/replay-cuda.test and bin/pool/*.pool.json (bench/build_bin.sh; CONF names another
# folder of pool.json files). Writes $OUT/replay_traces.tgz.
set -x
: "${OUT:?set OUT to an output folder}"
B=$PWD/bin; C=${CONF:-bin/pool}; O=$OUT/replay_traces; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
run() { # name trace config
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 20 --json > $O/$1.json 2> $O/$1.err; echo "$1 rc=$?"
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 1 --verify --touch > $O/$1.verify.txt 2>&1; echo "$1 verify+touch rc=$?"
  grep -E "speedup|recorded|result|FAIL" $O/$1.verify.txt
}
for t in pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache f_jax; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=internal/cli/analyze/bundled/pytorch-train.arrow
  run $t $tr $C/$t.pool.json
done
[ "${EXPANDABLE:-0}" = 1 ] && run expandable-pytorch-train internal/cli/analyze/bundled/pytorch-train.arrow $C/expandable.pool.json
[ "${EXPANDABLE:-0}" = 1 ] && run expandable-kvcache testdata/h200/h_torch_nocache_kvcache.arrow $C/expandable.pool.json
cd $OUT && tar czf replay_traces.tgz replay_traces && rm -rf replay_traces
