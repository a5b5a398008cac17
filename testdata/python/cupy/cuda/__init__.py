"""The stand-in's cupy.cuda."""

from . import memory  # noqa: F401
from . import memory_hook  # noqa: F401
