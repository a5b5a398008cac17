#!/bin/bash
# Ninth GPU run: the CUDA backend's tests (with the paged arena's), the cost of the page calls
# (BenchmarkCUDAPageCalls), then the two traces whose
# recommendation became a paged arena (variable-shape CNN and KV-cache generation, PyTorch without
# caching) against both variants in one run each: the paged pool.json analyze writes now and the
# one-region (fixed) pool.json it wrote before; 20 timed repetitions (JSON), and once with
# --verify --touch. Needs bin/replay-cuda, bin/replay-cuda.test and bin/gpu9/*.pool.json.
set -x
RUN=${RUN:-r9}; B=$PWD/bin; O=$OUT/$RUN; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)|paged arena on the GPU" $O/cudatest.txt
timeout 120 ./bin/replay-cuda.test -test.run XXX -test.bench CUDAPageCalls -test.benchtime 300x -test.count 3 > $O/pagecalls.txt 2>&1
grep Benchmark $O/pagecalls.txt
run() { # name trace config
  timeout 150 $B/replay-cuda $2 --config $3 --repeat 20 --json > $O/$1.json 2> $O/$1.err; echo "$1 rc=$?"
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 1 --verify --touch > $O/$1.verify.txt 2>&1; echo "$1 verify+touch rc=$?"
  grep -E "speedup|recorded|result|FAIL|reserved/live" -A2 $O/$1.verify.txt | head -20
}
for t in g_torch_nocache_cnn h_torch_nocache_kvcache; do
  for v in paged fixed; do run $t.$v testdata/h200/$t.arrow bin/gpu9/$t.$v.pool.json; done
done
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
