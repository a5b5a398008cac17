"""The stand-in's torch.cuda.memory: _record_memory_history with PyTorch 2.1-2.11's keyword
arguments, and _snapshot returning a dict in the real snapshot's format."""

import sys

_history = {"enabled": False, "context": None, "stacks": None, "max_entries": sys.maxsize, "traces": {}}


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None):
    """Turns the memory history on (enabled="all") or off (None), as PyTorch 2.x does."""
    if enabled not in (None, "state", "all"):
        raise ValueError("enabled must be None, 'state' or 'all'")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError("context must be None, 'state', 'alloc' or 'all'")
    if stacks not in ("python", "all"):
        raise ValueError("stacks must be 'python' or 'all'")
    _history.update(enabled=enabled == "all", context=context, stacks=stacks, max_entries=max_entries)


def _snapshot(device=None):
    """The snapshot dict: segments (none kept by the stand-in), device_traces by device ordinal."""
    traces = _history["traces"]
    devices = max(traces) + 1 if traces else 1
    return {
        "segments": [],
        "device_traces": [list(traces.get(d, [])) for d in range(devices)],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False,
                               "roundup_power2_divisions": {}},
    }
