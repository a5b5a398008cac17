#!/bin/bash
# Records every kind of program with record's shim on the GPU machine (docs/compatibility.md):
# nvcc static and shared cudart builds, PyTorch without caching (MLP training, variable-shape CNN,
# KV-cache generation), with its caching allocator (MLP, CNN) and with expandable segments (MLP),
# CuPy and JAX; counts each trace's events with pyarrow (count_events.py), reads the PyTorch trace
# with pyarrow and pandas (testdata/trace/check_pyarrow.py), and times cudaMalloc/cudaFree and
# cudaMallocAsync/cudaFreeAsync pairs by size (alloc_loop costs, docs/benchmarks.md).
# Run from the repository root with OUT set to an output folder; needs bin/record and
# bin/liballocscope.so (bench/build_bin.sh), nvcc, and python3 with torch, cupy, jax,
# pyarrow and pandas. Writes $OUT/record_programs.tgz: the traces (testdata/h200/*.arrow),
# counts.jsonl, PyTorch's own figures per run (*.stats.json) and costs.txt.
set -x
: "${OUT:?set OUT to an output folder}"
B=$PWD/bin; O=$OUT/record_programs; mkdir -p $O
cd bench
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
python3 ../testdata/trace/check_pyarrow.py $O/c_torch_nocache_train.arrow
./alloc_loop_static costs | tee $O/costs.txt
ls -la $O; cd $OUT && tar czf record_programs.tgz record_programs && rm -rf record_programs
