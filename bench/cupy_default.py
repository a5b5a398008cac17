"""CuPy with its default memory pool, for record's framework capture (framework_check.sh): counts the
pool's requests with a MemoryHook of its own, beside the one record installs.

usage: python3 cupy_default.py N    (N arrays of cycling sizes, each filled, reduced and freed)
Prints the checksum of the reductions, then the hook's malloc and free counts.
"""
import hashlib
import sys

import cupy
from cupy.cuda import memory_hook


class Count(memory_hook.MemoryHook):
    name = "count"

    def __init__(self):
        self.mallocs = self.frees = 0

    def malloc_postprocess(self, **kw):
        self.mallocs += 1

    def free_preprocess(self, **kw):
        self.frees += 1


n = int(sys.argv[1])
sizes = [1024, 65536, 1 << 20, 8 << 20]
h = hashlib.sha256()
count = Count()
with count:
    acc = cupy.zeros(1, dtype=cupy.float64)
    for i in range(n):
        a = cupy.arange(sizes[i % 4] // 8, dtype=cupy.float64) * (i + 1)
        acc += a.sum()
        del a
    h.update(cupy.asnumpy(acc).tobytes())
print("checksum", h.hexdigest())
print("hook mallocs", count.mallocs, "frees", count.frees, flush=True)
