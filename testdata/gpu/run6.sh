#!/bin/bash
# Sixth GPU run: where the pool's time per request goes on the H200 host. The same pool code
# (1) in the tight-loop Go benchmark over simulated memory, (2) alone over the CUDA backend
# (--modes pool), (3) interleaved with raw and async (the default), (4) over the host backend;
# plus the CPU it ran on. Needs bin/replay-cuda, bin/replay-cuda.test, bin/gpu5/*.pool.json.
B=$PWD/bin; O=$OUT/r6; mkdir -p $O
lscpu > $O/lscpu.txt; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor > $O/governor.txt 2>&1
grep -E "Model name|^CPU\(s\)|MHz" $O/lscpu.txt; cat $O/governor.txt
(cd replay && timeout 120 $B/replay-cuda.test -test.run '^$' -test.bench RealTracePool -test.benchtime 300x -test.count 1) > $O/bench.txt 2>&1
grep Benchmark $O/bench.txt
for t in pytorch-train a_static h_torch_nocache_kvcache; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=testdata/pytorch-train.arrow
  $B/replay-cuda $tr --config bin/gpu5/$t.pool.json --modes pool --repeat 20 --json > $O/$t.poolonly.json 2>$O/$t.poolonly.err
  $B/replay-cuda $tr --config bin/gpu5/$t.pool.json --backend host --repeat 20 --json > $O/$t.host.json 2>$O/$t.host.err
  $B/replay-cuda $tr --config bin/gpu5/$t.pool.json --repeat 20 --json > $O/$t.all.json 2>$O/$t.all.err
  echo "$t done rc=$?"
done
cd $OUT && tar czf r6.tgz r6 && rm -rf r6
