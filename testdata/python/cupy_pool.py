"""record's CuPy test: two pool requests and one free through the stand-in cupy's memory pool."""

import builtins

import cupy

print("user sitecustomize ran: %s" % getattr(builtins, "user_sitecustomize_ran", False))
p1 = cupy.cuda.memory.malloc(100)
p2 = cupy.cuda.memory.malloc(1000)
cupy.cuda.memory.free(p1)
print("live %#x" % p2)
