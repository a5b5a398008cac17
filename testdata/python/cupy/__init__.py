"""A stand-in for CuPy, for allocscope's tests: cupy.cuda.memory_hook.MemoryHook with CuPy's
thread-local hook registry, and cupy.cuda.memory.malloc/free, which call the hooks as CuPy's
memory pool does."""

from . import cuda  # noqa: F401
