"""The stand-in's cupy.cuda.memory_hook: MemoryHook and its per-thread registry, as in CuPy."""

import threading

_local = threading.local()


def get_memory_hooks():
    """The memory hooks entered in this thread, by name."""
    hooks = getattr(_local, "hooks", None)
    if hooks is None:
        hooks = _local.hooks = {}
    return hooks


class MemoryHook:
    """Base class of CuPy's memory hooks: entering one makes the pool call its methods."""

    name = "MemoryHook"

    def __enter__(self):
        hooks = get_memory_hooks()
        if self.name in hooks:
            raise RuntimeError("memory hook %s already exists" % self.name)
        hooks[self.name] = self
        return self

    def __exit__(self, *exc):
        del get_memory_hooks()[self.name]

    def alloc_preprocess(self, **kwargs):
        """Before the pool allocates from the device: device_id, mem_size."""

    def alloc_postprocess(self, **kwargs):
        """After the pool allocates from the device: device_id, mem_size, mem_ptr."""

    def malloc_preprocess(self, **kwargs):
        """Before a pool request: device_id, size, mem_size."""

    def malloc_postprocess(self, **kwargs):
        """After a pool request: device_id, size, mem_size, mem_ptr, pmem_id."""

    def free_preprocess(self, **kwargs):
        """Before a block returns to the pool: device_id, mem_size, mem_ptr, pmem_id."""

    def free_postprocess(self, **kwargs):
        """After a block returns to the pool: device_id, mem_size, mem_ptr, pmem_id."""
