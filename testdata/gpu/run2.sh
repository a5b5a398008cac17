#!/bin/bash
# Second GPU run: record every kind of program with the shim (compatibility table), the PyTorch
# workloads for analysis and replay, the pyarrow/pandas check, and the shim's overhead on a real
# cudaMallocAsync loop. Needs bin/record and bin/liballocscope.so carried from the build machine.
set -x
B=$PWD/bin; O=$OUT/r; mkdir -p $O
cd testdata/gpu
nvcc -O2 -o alloc_loop_static alloc_loop.cu && nvcc -O2 -cudart shared -o alloc_loop_shared alloc_loop.cu
REC="$B/record --shim $B/liballocscope.so"
$REC -o $O/a_static.arrow -- ./alloc_loop_static 300 50
$REC -o $O/b_shared.arrow -- ./alloc_loop_shared 300 50
PYTORCH_NO_CUDA_MEMORY_CACHING=1 $REC -o $O/c_torch_nocache_train.arrow -- python3 torch_work.py train $O/c
$REC -o $O/d_torch_caching_train.arrow -- python3 torch_work.py train $O/d1
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $REC -o $O/d_torch_expandable_train.arrow -- python3 torch_work.py train $O/d2
$REC -o $O/e_cupy.arrow -- python3 cupy_work.py 100
XLA_PYTHON_CLIENT_ALLOCATOR=platform $REC -o $O/f_jax.arrow -- python3 jax_work.py 20
PYTORCH_NO_CUDA_MEMORY_CACHING=1 $REC -o $O/g_torch_nocache_cnn.arrow -- python3 torch_work.py cnn $O/g
PYTORCH_NO_CUDA_MEMORY_CACHING=1 $REC -o $O/h_torch_nocache_kvcache.arrow -- python3 torch_work.py kvcache $O/h
$REC -o $O/i_torch_caching_cnn.arrow -- python3 torch_work.py cnn $O/i
python3 count_events.py $O/*.arrow > $O/counts.jsonl
python3 ../trace/check_pyarrow.py $O/c_torch_nocache_train.arrow
for i in 1 2 3; do ./alloc_loop_static bench 200000 1048576; $REC -q -o /tmp/bench.arrow -- ./alloc_loop_static bench 200000 1048576; done 2>&1 | tee $O/bench.txt
./alloc_loop_static costs | tee $O/costs.txt
ls -la $O; cd $OUT && tar czf r.tgz r && rm -rf r
