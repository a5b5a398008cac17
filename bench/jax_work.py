"""JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform: allocations go straight to the driver.

usage: [XLA_PYTHON_CLIENT_ALLOCATOR=platform] python3 jax_work.py N   (framework_check.sh runs it with the defaults)
"""
import sys

import jax
import jax.numpy as jnp

n = int(sys.argv[1])
total = 0.0
for i in range(n):
    x = jnp.ones((256 * (1 + i % 4), 1024), dtype=jnp.float32)
    total += float((x * 2).sum())
    del x
print(f"expected: arrays={n} devices={jax.devices()} total={total}")
