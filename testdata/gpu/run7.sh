#!/bin/bash
# Seventh GPU run: the CUDA backend's tests, then every trace against the pool.json of the new
# threshold rule (largest threshold within 2% of the least memory; analyze at commit a04c7e9):
# 20 timed repetitions (JSON), and once with --verify --touch.
# Needs bin/replay-cuda, bin/replay-cuda.test and bin/gpu5/*.pool.json (see docs/benchmarks.md).
set -x
B=$PWD/bin; O=$OUT/r7; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
run() { # name trace config
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 20 --json > $O/$1.json 2> $O/$1.err; echo "$1 rc=$?"
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 1 --verify --touch > $O/$1.verify.txt 2>&1; echo "$1 verify+touch rc=$?"
  grep -E "speedup|recorded|result|FAIL" $O/$1.verify.txt
}
for t in pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache f_jax; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=testdata/pytorch-train.arrow
  run $t $tr bin/gpu5/$t.pool.json
done
cd $OUT && tar czf r7.tgz r7 && rm -rf r7
