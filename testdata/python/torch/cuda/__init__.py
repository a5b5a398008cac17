"""The stand-in's torch.cuda: lazy initialisation and a fake caching allocator whose blocks are
recorded in the memory history as PyTorch 2.x records them."""

import time
import traceback

from .. import _C
from . import memory

_initialized = False
_next_addr = {}  # device -> next block address
_sizes = {}  # address -> size


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError."""


def is_initialized():
    """Whether CUDA has been initialised in this process."""
    return _initialized


def _lazy_init():
    """Initialises CUDA once (PyTorch calls it by name before its first CUDA allocation)."""
    global _initialized
    _initialized = True


def _frames():
    """The Python stack as the history's "frames" (innermost first), or [] without stacks."""
    if memory._history["context"] is None:
        return []
    stack = traceback.extract_stack()[:-3]
    return [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in reversed(stack)]


def _record(device, action, addr, size, **extra):
    """Appends one entry to the device's history when it is on, dropping the oldest past max_entries."""
    if not memory._history["enabled"]:
        return
    entry = {"action": action, "addr": addr, "size": size, "stream": 0,
             "time_us": time.time_ns() // 1000, "frames": _frames()}
    entry.update(extra)
    trace = memory._history["traces"].setdefault(device, [])
    trace.append(entry)
    if len(trace) > memory._history["max_entries"]:
        del trace[0]


def _fake_alloc(size, device=0):
    """Allocates a block of size bytes as a tensor would and returns its address; the first block
    of a device also makes its 2 MiB segment."""
    _lazy_init()
    if device not in _next_addr:
        _next_addr[device] = 0x7F0000000000 + (device << 32)
        _record(device, "segment_alloc", _next_addr[device], 2 << 20)
    addr = _next_addr[device]
    _next_addr[device] += (size + 511) // 512 * 512
    _sizes[addr] = (device, size)
    _record(device, "alloc", addr, size)
    return addr


def _fake_free(addr):
    """Frees the block at addr as a tensor's deletion would."""
    device, size = _sizes.pop(addr)
    _record(device, "free_requested", addr, size)
    _record(device, "free_completed", addr, size)


def _fake_oom(size, device=0):
    """Fails an allocation of size bytes as the caching allocator does: the observers run, then
    OutOfMemoryError is raised."""
    _lazy_init()
    _record(device, "oom", 0, size, device_free=1 << 20)
    for observer in list(_C._oom_observers):
        observer(device, size, 0, 1 << 20)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
