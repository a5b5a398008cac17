"""CuPy with its memory pool off, for record --pool's bars: every array is a cuMemAlloc/cuMemFree.
Its output must be bit-identical with and without the pool.

usage: python3 cupy_pool.py N    (N arrays of cycling sizes, each filled, reduced and freed)
Prints a SHA-256 of every reduction's result.
"""
import hashlib
import sys

import cupy

cupy.cuda.set_allocator(None)
n = int(sys.argv[1])
sizes = [1024, 65536, 1 << 20, 8 << 20]
h = hashlib.sha256()
acc = cupy.zeros(1, dtype=cupy.float64)
for i in range(n):
    a = cupy.arange(sizes[i % 4] // 8, dtype=cupy.float64) * (i + 1)
    acc += a.sum()
    del a
    if i % 100 == 99:
        h.update(cupy.asnumpy(acc).tobytes())
h.update(cupy.asnumpy(acc).tobytes())
print("checksum", h.hexdigest())
