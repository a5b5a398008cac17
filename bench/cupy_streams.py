"""CuPy on CUDA's stream-ordered allocator (cudaMallocAsync through MemoryAsyncPool) with two
streams taking turns, for record --pool's stream-ordered serving: outputs must be bit-identical
with and without the pool.

usage: python3 cupy_streams.py N    (N arrays of cycling sizes, alternating between two streams)
Prints a SHA-256 of every reduction's result.
"""
import hashlib
import sys

import cupy

cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
n = int(sys.argv[1])
sizes = [1024, 65536, 1 << 20, 8 << 20]
streams = [cupy.cuda.Stream(non_blocking=False), cupy.cuda.Stream(non_blocking=False)]
h = hashlib.sha256()
acc = [cupy.zeros(1, dtype=cupy.float64) for _ in streams]
for i in range(n):
    with streams[i % 2]:
        a = cupy.arange(sizes[i % 4] // 8, dtype=cupy.float64) * (i + 1)
        acc[i % 2] += a.sum()
        del a
for s in streams:
    s.synchronize()
for x in acc:
    h.update(cupy.asnumpy(x).tobytes())
print("checksum", h.hexdigest())
