#!/bin/bash
# Builds, on the development machine, what the GPU scripts in bench/ need under bin/
# (docs/benchmarks.md, "Machines and how to reproduce"):
#   bin/record, bin/liballocscope.so     record and its shim (record_programs.sh, recorder.sh)
#   bin/replay-cuda, bin/replay-cuda.test replay and its tests with the CUDA backend (docs/replay.md);
#                                         they need cuda.h and the toolkit's stub libcuda.so in
#                                         .cuda/include and .cuda/lib (git-ignored)
#   bin/pool/*.pool.json                  the pool.json analyze recommends for each replayed trace,
#                                         the one-region (.fixed) and paged (.paged) variants of the
#                                         CNN and KV-cache traces, and PyTorch's expandable segments
# NOCUDA=1 skips the two CUDA binaries. Run from anywhere; it works in the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin/pool
go build -o bin/record ./cmd/record
bin/record shim -o bin/liballocscope.so
if [ "${NOCUDA:-0}" != 1 ]; then
  make replay-cuda
  CGO_CFLAGS="-I$PWD/.cuda/compat -I$PWD/.cuda/include" CGO_LDFLAGS="-L$PWD/.cuda/lib" \
    go test -c -tags cuda -o bin/replay-cuda.test ./internal/replay
fi
go build -o bin/analyze ./cmd/analyze
for tr in internal/cli/analyze/bundled/pytorch-train.arrow testdata/h200/{a_static,e_cupy,g_torch_nocache_cnn,h_torch_nocache_kvcache,f_jax}.arrow; do
  bin/analyze --quiet --emit-config "bin/pool/$(basename "$tr" .arrow).pool.json" "$tr"
done
for t in g_torch_nocache_cnn h_torch_nocache_kvcache; do
  for a in fixed paged; do
    bin/analyze --quiet --arena $a --emit-config "bin/pool/$t.$a.pool.json" "testdata/h200/$t.arrow"
  done
done
echo '{"version": 1, "policy": "pytorch", "pytorch": {"expandable_segments": true}}' > bin/pool/expandable.pool.json
ls -l bin bin/pool
