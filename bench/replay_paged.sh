#!/bin/bash
# The paged large-block arena against one region on the GPU (docs/benchmarks.md, "Paged arena
# against one region"), on the two traces where one region passes 1.05 x peak live (variable-shape
# CNN and KV-cache generation, PyTorch without caching): the CUDA backend's tests, the cost of the
# page calls (BenchmarkCUDAPageCalls: single pages and runs of 16), then each trace with its paged
# and its one-region (fixed) pool.json: 20 timed repetitions (JSON) and one with --verify --touch.
# Run from the repository root with OUT set to an output folder; needs bin/replay-cuda,
# bin/replay-cuda.test and bin/pool/*.{paged,fixed}.pool.json (bench/build_bin.sh; CONF
# names another folder). Writes $OUT/replay_paged.tgz.
set -x
: "${OUT:?set OUT to an output folder}"
B=$PWD/bin; C=${CONF:-bin/pool}; O=$OUT/replay_paged; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
timeout 120 ./bin/replay-cuda.test -test.run XXX -test.bench CUDAPageCalls -test.benchtime 100x -test.count 3 -test.v > $O/pagecalls.txt 2>&1
grep -E "Benchmark|cuMemUnmap over" $O/pagecalls.txt
run() { # name trace config
  timeout 150 $B/replay-cuda $2 --config $3 --repeat 20 --json > $O/$1.json 2> $O/$1.err; echo "$1 rc=$?"
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 1 --verify --touch > $O/$1.verify.txt 2>&1; echo "$1 verify+touch rc=$?"
  grep -E "speedup|result|FAIL" $O/$1.verify.txt
}
for t in g_torch_nocache_cnn h_torch_nocache_kvcache; do
  for v in paged fixed; do run $t.$v testdata/h200/$t.arrow $C/$t.$v.pool.json; done
done
cd $OUT && tar czf replay_paged.tgz replay_paged && rm -rf replay_paged
