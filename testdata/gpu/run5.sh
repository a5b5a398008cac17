#!/bin/bash
# Fifth GPU run: the CUDA backend's tests (VMM mapper for expandable segments, async mode synchronizing
# at the trace's sync points), then every trace against its recommended pool.json (20 timed
# repetitions, JSON) and once with --verify --touch, plus PyTorch's expandable segments on two traces.
# Needs bin/replay-cuda, bin/replay-cuda.test and bin/gpu5/*.pool.json (see docs/benchmarks.md).
# RUN names the output (default r5); EXPANDABLE=0 skips the expandable-segments replays (run7.sh);
# CONF is the folder of the pool.json files (default bin/gpu5).
set -x
RUN=${RUN:-r5}; B=$PWD/bin; O=$OUT/$RUN; mkdir -p $O
timeout 300 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
run() { # name trace config
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 20 --json > $O/$1.json 2> $O/$1.err; echo "$1 rc=$?"
  timeout 100 $B/replay-cuda $2 --config $3 --repeat 1 --verify --touch > $O/$1.verify.txt 2>&1; echo "$1 verify+touch rc=$?"
  grep -E "speedup|recorded|result|FAIL" $O/$1.verify.txt
}
for t in pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache f_jax; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=testdata/pytorch-train.arrow
  run $t $tr ${CONF:-bin/gpu5}/$t.pool.json
done
[ "${EXPANDABLE:-1}" = 0 ] || run expandable-pytorch-train testdata/pytorch-train.arrow bin/gpu5/expandable.pool.json
[ "${EXPANDABLE:-1}" = 0 ] || run expandable-kvcache testdata/h200/h_torch_nocache_kvcache.arrow bin/gpu5/expandable.pool.json
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
