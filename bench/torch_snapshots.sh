#!/bin/bash
# PyTorch's own memory snapshots and figures of the three workloads on the GPU machine, without
# allocscope (testdata/torch/): torch_work.py with the default caching allocator (snapshots), with
# expandable segments (the MLP's snapshot) and without caching (figures only). Run from the
# repository root with OUT set to an output folder; needs python3 with torch. Writes
# $OUT/torch_snapshots.tgz: SETTING/WORKLOAD.stats.json and SETTING/WORKLOAD.snapshot.pickle, which
# testdata/torch/ holds as WORKLOAD.SETTING.stats.json and WORKLOAD.SETTING.snapshot.pickle.gz (.xz).
set -x
: "${OUT:?set OUT to an output folder}"
r=$OUT/torch_snapshots; mkdir -p $r
cd bench
PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 torch_work.py train $r/nocache
python3 torch_work.py train $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py train $r/expandable --snapshot
python3 torch_work.py cnn $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py cnn $r/expandable
python3 torch_work.py kvcache $r/caching --snapshot
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_work.py kvcache $r/expandable
cd $OUT && tar czf torch_snapshots.tgz torch_snapshots && rm -rf torch_snapshots
