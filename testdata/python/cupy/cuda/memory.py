"""The stand-in's memory pool: malloc and free call the thread's memory hooks as CuPy's pool does
(sizes rounded up to 512 bytes; every request allocates fresh device memory)."""

from . import memory_hook

_next = 0x7E0000000000
_blocks = {}  # ptr -> rounded size


def _call(method, **kwargs):
    for hook in list(memory_hook.get_memory_hooks().values()):
        getattr(hook, method)(**kwargs)


def malloc(size, device=0):
    """Returns the address of a new block of size bytes."""
    global _next
    mem_size = (size + 511) // 512 * 512
    _call("malloc_preprocess", device_id=device, size=size, mem_size=mem_size)
    _call("alloc_preprocess", device_id=device, mem_size=mem_size)
    ptr, _next = _next, _next + mem_size
    _call("alloc_postprocess", device_id=device, mem_size=mem_size, mem_ptr=ptr)
    _blocks[ptr] = mem_size
    _call("malloc_postprocess", device_id=device, size=size, mem_size=mem_size, mem_ptr=ptr, pmem_id=1)
    return ptr


def free(ptr, device=0):
    """Returns the block at ptr to the pool."""
    mem_size = _blocks.pop(ptr)
    _call("free_preprocess", device_id=device, mem_size=mem_size, mem_ptr=ptr, pmem_id=1)
    _call("free_postprocess", device_id=device, mem_size=mem_size, mem_ptr=ptr, pmem_id=1)
