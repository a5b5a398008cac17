#!/bin/bash
# Twelfth GPU run: the CUDA mapper unmaps a run of pages with one cuMemUnmap where the driver
# allows it (remembered per backend); the CUDA tests, BenchmarkCUDAPageCalls (16-page runs too),
# and the CNN and KV-cache traces with their paged pool.json (20 repetitions, --verify --touch).
set -x
RUN=${RUN:-r12}; B=$PWD/bin; O=$OUT/$RUN; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
timeout 120 ./bin/replay-cuda.test -test.run XXX -test.bench CUDAPageCalls -test.benchtime 100x -test.count 3 -test.v > $O/pagecalls.txt 2>&1
grep -E "Benchmark|cuMemUnmap over" $O/pagecalls.txt
for t in g_torch_nocache_cnn h_torch_nocache_kvcache; do
  timeout 150 $B/replay-cuda testdata/h200/$t.arrow --config bin/gpu9/$t.paged.pool.json --repeat 20 --json > $O/$t.paged.json 2> $O/$t.paged.err; echo "$t rc=$?"
  timeout 100 $B/replay-cuda testdata/h200/$t.arrow --config bin/gpu9/$t.paged.pool.json --repeat 1 --verify --touch > $O/$t.paged.verify.txt 2>&1; echo "$t verify rc=$?"
  grep -E "speedup|result" $O/$t.paged.verify.txt
done
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
