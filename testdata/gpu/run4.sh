#!/bin/bash
# Fourth GPU run: replay the five traces again with the final pool code (after the performance work),
# 10 repetitions each, JSON reports. Needs bin/replay-cuda and bin/gpu3/*.pool.json.
set -x
O=$OUT/r4; mkdir -p $O
for t in pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=testdata/pytorch-train.arrow
  timeout 100 bin/replay-cuda $tr --config bin/gpu3/$t.pool.json --repeat 10 --json > $O/$t.json 2> $O/$t.err; echo "$t rc=$?"
  python3 -c "import json,sys; d=json.load(open('$O/$t.json')); print('$t', round(d['speedup_raw_over_pool']), round(d['speedup_async_over_pool'],1))"
done
cd $OUT && tar czf r4.tgz r4 && rm -rf r4
