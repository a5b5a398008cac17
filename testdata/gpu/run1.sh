#!/bin/bash
# First GPU run: fetch headers for local cgo builds, build the nvcc test program, run workloads without the shim.
set -x
o=$OUT; mkdir -p $o/w/cuda/include $o/w/cuda/lib $o/w/bin $o/w/res
cp /usr/local/cuda/include/cuda.h $o/w/cuda/include/
cp /usr/local/cuda/lib64/stubs/libcuda.so $o/w/cuda/lib/
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $o/w/res/smi.csv
python3 -c "import torch,cupy,jax,pyarrow,pandas;print(torch.__version__,cupy.__version__,jax.__version__,pyarrow.__version__,pandas.__version__)" > $o/w/res/versions.txt 2>&1
python3 -c "import duckdb;print(duckdb.__version__)" >> $o/w/res/versions.txt 2>&1
cd testdata/gpu
nvcc -O2 -o $o/w/bin/alloc_loop_static alloc_loop.cu && nvcc -O2 -cudart shared -o $o/w/bin/alloc_loop_shared alloc_loop.cu
$o/w/bin/alloc_loop_static 300 50; $o/w/bin/alloc_loop_shared 300 50
$o/w/bin/alloc_loop_static bench 20000 1048576
r=$o/w/res
PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 torch_work.py train $r/nocache
python3 torch_work.py train $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py train $r/expandable --snapshot
python3 torch_work.py cnn $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py cnn $r/expandable
python3 torch_work.py kvcache $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py kvcache $r/expandable
python3 cupy_work.py 100
XLA_PYTHON_CLIENT_ALLOCATOR=platform python3 jax_work.py 20 2>&1 | tail -3
cd $o && tar czf w.tgz w && rm -rf w && ls -la $o
