"""The stand-in's torch._C: the out-of-memory observer list of the caching allocator."""

_oom_observers = []


def _cuda_attach_out_of_memory_observer(observer):
    """Registers observer(device, alloc, device_allocated, device_free), called on an out-of-memory error."""
    _oom_observers.append(observer)
