"""CuPy with its memory pool disabled: every array is a cuMemAlloc/cuMemFree through dlsym'd libcuda.

usage: python3 cupy_work.py N    (N arrays of cycling sizes, each created, used and freed)
"""
import sys

import cupy

cupy.cuda.set_allocator(None)
n = int(sys.argv[1])
sizes = [1024, 65536, 1 << 20, 8 << 20]
for i in range(n):
    a = cupy.ones(sizes[i % 4] // 4, dtype=cupy.float32)
    assert float(a[:4].sum()) == 4.0
    del a
cupy.cuda.Device().synchronize()
print(f"expected: arrays={n}")
