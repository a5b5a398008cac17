"""A stand-in for PyTorch, for allocscope's tests: only what record's Python hook touches
(torch.cuda.memory's history and snapshot, torch.cuda.is_initialized and _lazy_init, the
out-of-memory observer, torch.cuda.OutOfMemoryError), plus torch.cuda._fake_alloc/_fake_free/
_fake_oom, which act as the caching allocator would for a tensor's block."""

from . import _C  # noqa: F401
from . import cuda  # noqa: F401
