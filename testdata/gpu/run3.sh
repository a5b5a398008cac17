#!/bin/bash
# Third GPU run: replay the recorded traces on the H200 against their pool.json (raw cudaMalloc,
# the pool, the stream-ordered pool), the CUDA backend's tests, the shim's overhead on a real
# cudaMallocAsync loop, and a re-recording of the compatibility cases with the current shim.
# Needs bin/{replay-cuda,replay-cuda.test,record,liballocscope.so} and bin/gpu3/*.pool.json.
set -x
B=$PWD/bin; O=$OUT/r3; mkdir -p $O
timeout 120 ./bin/replay-cuda.test -test.count=1 -test.run CUDA -test.v > $O/cudatest.txt 2>&1; echo "cuda tests rc=$?"
grep -E "^(--- |ok|PASS|FAIL)" $O/cudatest.txt
for t in pytorch-train a_static e_cupy g_torch_nocache_cnn h_torch_nocache_kvcache; do
  tr=testdata/h200/$t.arrow; [ $t = pytorch-train ] && tr=testdata/pytorch-train.arrow
  timeout 90 $B/replay-cuda $tr --config bin/gpu3/$t.pool.json --repeat 5 --json > $O/$t.json 2> $O/$t.err; echo "$t rc=$?"
  timeout 90 $B/replay-cuda $tr --config bin/gpu3/$t.pool.json --repeat 1 --verify --touch > $O/$t.verify.txt 2>&1; echo "$t verify+touch rc=$?"
  grep -E "speedup|result|FAIL " $O/$t.verify.txt
done
cd testdata/gpu
nvcc -O2 -o alloc_loop_static alloc_loop.cu && nvcc -O2 -cudart shared -o alloc_loop_shared alloc_loop.cu
REC="$B/record --shim $B/liballocscope.so"
for i in 1 2 3; do ./alloc_loop_static bench 200000 1048576; $REC -q -o /tmp/bench.arrow -- ./alloc_loop_static bench 200000 1048576; done 2>&1 | tee $O/bench.txt
$REC -o $O/a_static.arrow -- ./alloc_loop_static 300 50
$REC -o $O/b_shared.arrow -- ./alloc_loop_shared 300 50
PYTORCH_NO_CUDA_MEMORY_CACHING=1 $REC -o $O/c_torch_nocache_train.arrow -- python3 torch_work.py train $O/c
$REC -o $O/e_cupy.arrow -- python3 cupy_work.py 100
python3 count_events.py $O/*.arrow > $O/counts.jsonl; cat $O/counts.jsonl
python3 ../trace/check_pyarrow.py $O/c_torch_nocache_train.arrow
rm -f $O/*.arrow; cd $OUT && tar czf r3.tgz r3 && rm -rf r3
