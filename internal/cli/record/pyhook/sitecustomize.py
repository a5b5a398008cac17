"""allocscope record's Python startup hook (docs/compatibility.md, "Framework allocators").

record puts the directory holding this file first on PYTHONPATH, so every Python process of the
recorded program (and every child that inherits the environment) imports it at startup, through
the site module. It does nothing until the program imports torch or cupy:

* torch: when CUDA is initialised (torch.cuda._lazy_init, which PyTorch calls before its first CUDA
  allocation), it turns on the caching allocator's memory history
  (torch.cuda.memory._record_memory_history) and, at exit, on SIGTERM, on SIGINT and on an
  out-of-memory error, writes torch.cuda.memory._snapshot() to $ALLOCSCOPE_LOG_DIR/torch-<pid>.pickle.
* cupy: it enters a cupy.cuda.memory_hook.MemoryHook that logs the memory pool's requests and frees
  to $ALLOCSCOPE_LOG_DIR/cupy-<pid>.jsonl.

Then it runs the sitecustomize module that the program would have imported without record, so
that a user's own hook still runs.
"""

import os
import sys

_LOG_DIR = os.path.abspath(os.environ["ALLOCSCOPE_LOG_DIR"]) if os.environ.get("ALLOCSCOPE_LOG_DIR") else ""
_HERE = os.path.dirname(os.path.abspath(__file__))


def _env_int(name, default):
    """Returns the integer in environment variable name, or default when unset or not a number."""
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


class _Finder:
    """A sys.meta_path finder that calls a function after a watched module has been executed."""

    def __init__(self, callbacks):
        self.callbacks = callbacks  # module name -> function(module)

    def find_spec(self, name, path=None, target=None):
        """Finds name with the other finders and wraps its loader when name is watched."""
        callback = self.callbacks.pop(name, None)
        if callback is None:
            return None
        if not self.callbacks:
            _remove_finder(self)
        spec = None
        for finder in list(sys.meta_path):
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, callback)
        return spec


def _remove_finder(finder):
    """Takes finder off sys.meta_path."""
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


class _Loader:
    """Wraps a loader: runs callback(module) once the module has been executed."""

    def __init__(self, loader, callback):
        self.loader = loader
        self.callback = callback

    def create_module(self, spec):
        """Delegates to the wrapped loader."""
        return self.loader.create_module(spec)

    def exec_module(self, module):
        """Executes the module, then the callback (whose failures only print a warning). The module
        sees its own loader, not this wrapper."""
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.callback(module)
        except Exception as err:  # the program must run on whatever happens here
            sys.stderr.write("allocscope: warning: %s hook: %s\n" % (module.__name__, err))

    def __getattr__(self, name):
        return getattr(self.loader, name)


# ---- PyTorch ----------------------------------------------------------------------------------

_torch_state = {"enabled_pid": 0, "torch": None}


def _torch_imported(torch):
    """Arranges for the memory history to be turned on when CUDA is initialised."""
    _torch_state["torch"] = torch
    cuda = torch.cuda
    if cuda.is_initialized():
        _torch_enable()
        return
    real_lazy_init = cuda._lazy_init

    def _lazy_init(*args, **kwargs):
        result = real_lazy_init(*args, **kwargs)
        if _torch_state["enabled_pid"] != os.getpid() and cuda.is_initialized():
            _torch_enable()
        return result

    # PyTorch's C++ code calls torch.cuda._lazy_init by name before its first CUDA allocation;
    # modules that imported the function itself get the wrapper too.
    for name, module in list(sys.modules.items()):
        if (name == "torch" or name.startswith("torch.")) and getattr(module, "_lazy_init", None) is real_lazy_init:
            module._lazy_init = _lazy_init


def _torch_options():
    """The _record_memory_history keyword arguments: the env vars or the defaults."""
    stacks = os.environ.get("ALLOCSCOPE_TORCH_STACKS", "python")
    context = os.environ.get("ALLOCSCOPE_TORCH_CONTEXT", "all")
    max_entries = _env_int("ALLOCSCOPE_TORCH_MAX_ENTRIES", 1000000)
    if stacks not in ("python", "all"):
        stacks = "python"
    if context not in ("all", "alloc", "state", "none"):
        context = "all"
    if context == "none":
        context = None
    return {"enabled": "all", "context": context, "stacks": stacks, "max_entries": max(1, max_entries)}


def _torch_enable():
    """Turns the memory history on and installs the exit, signal and out-of-memory dumps."""
    torch = _torch_state["torch"]
    _torch_state["enabled_pid"] = os.getpid()
    options = _torch_options()
    _torch_state["max_entries"] = options["max_entries"]
    torch.cuda.memory._record_memory_history(**options)
    import atexit

    atexit.register(_torch_dump)
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is not None:
        attach(_torch_oom)
    _install_signal_dumps()


def _torch_oom(device, alloc, device_allocated, device_free):
    """PyTorch's out-of-memory observer: dumps the history as it is at the failure."""
    _torch_dump()


def _torch_dump():
    """Writes the snapshot to $ALLOCSCOPE_LOG_DIR/torch-<pid>.pickle (atomically), and its bound to
    torch-<pid>.json. Does nothing in a process that did not turn the history on (a fork)."""
    torch = _torch_state["torch"]
    pid = os.getpid()
    if torch is None or _torch_state["enabled_pid"] != pid or not _LOG_DIR:
        return
    try:
        import json
        import pickle

        snapshot = torch.cuda.memory._snapshot()
        base = os.path.join(_LOG_DIR, "torch-%d" % pid)
        _write_atomic(base + ".json", json.dumps({"max_entries": _torch_state["max_entries"]}).encode())
        _write_atomic(base + ".pickle", pickle.dumps(snapshot, protocol=4))
    except Exception as err:
        sys.stderr.write("allocscope: warning: torch memory snapshot of pid %d: %s\n" % (pid, err))


def _write_atomic(path, data):
    """Writes data to path through a temporary file and a rename."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _install_signal_dumps():
    """Makes SIGTERM dump the history before the program's handler or the default action runs.
    SIGINT's default raises KeyboardInterrupt, so the exit dump covers it; a program's own SIGINT
    handler is chained the same way as SIGTERM's."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works on the main thread only
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN or previous is None:
            continue
        if signum == signal.SIGINT and previous is signal.default_int_handler:
            continue
        signal.signal(signum, _chained_handler(previous))


def _chained_handler(previous):
    """A signal handler that dumps the history, then calls previous, or, when previous is SIG_DFL,
    restores it and sends the signal again so that the process ends as it would have."""
    import signal

    def handler(signum, frame):
        _torch_dump()
        if callable(previous):
            return previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None

    return handler


# ---- CuPy -------------------------------------------------------------------------------------

_cupy_state = {"file": None, "lines": [], "pid": 0}


def _cupy_imported(cupy):
    """Enters a memory hook (CuPy's hooks are per thread: this one is the importing thread's)."""
    import atexit
    import cupy.cuda.memory_hook as memory_hook

    class AllocscopeHook(memory_hook.MemoryHook):
        """Logs every memory pool request (malloc) and return (free) as a JSON line."""

        name = "AllocscopeHook"

        def malloc_postprocess(self, **kw):
            _cupy_log("malloc", kw.get("device_id"), kw.get("size"), kw.get("mem_size"), kw.get("mem_ptr"))

        def free_preprocess(self, **kw):
            _cupy_log("free", kw.get("device_id"), kw.get("mem_size"), kw.get("mem_size"), kw.get("mem_ptr"))

    hook = AllocscopeHook()
    hook.__enter__()
    _cupy_state["pid"] = os.getpid()
    atexit.register(_cupy_flush)


def _cupy_log(op, device, size, mem_size, ptr):
    """Buffers one event line; every 4096 lines go to the file."""
    import threading
    import time

    line = '{"t":%d,"op":"%s","dev":%d,"size":%d,"mem_size":%d,"ptr":%d,"tid":%d}\n' % (
        time.monotonic_ns(), op, device or 0, size or 0, mem_size or 0, ptr or 0, threading.get_native_id())
    lines = _cupy_state["lines"]
    lines.append(line)
    if len(lines) >= 4096:
        _cupy_flush()


def _cupy_flush():
    """Appends the buffered lines to $ALLOCSCOPE_LOG_DIR/cupy-<pid>.jsonl."""
    lines = _cupy_state["lines"]
    if not lines or not _LOG_DIR or _cupy_state["pid"] != os.getpid():
        del lines[:]
        return
    data = "".join(lines)
    del lines[:]
    try:
        with open(os.path.join(_LOG_DIR, "cupy-%d.jsonl" % os.getpid()), "a") as f:
            f.write(data)
    except OSError as err:
        sys.stderr.write("allocscope: warning: cupy memory log of pid %d: %s\n" % (os.getpid(), err))


# ---- start-up ---------------------------------------------------------------------------------


def _chain_user_sitecustomize():
    """Runs the sitecustomize that comes after this one on sys.path, as Python would have. Its
    errors propagate to site, which reports them as it reports any sitecustomize's."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _install():
    """Watches for torch and cupy unless they are already imported or record said not to."""
    if not _LOG_DIR:
        return
    callbacks = {}
    if "torch" not in sys.modules:
        callbacks["torch"] = _torch_imported
    if "cupy" not in sys.modules:
        callbacks["cupy"] = _cupy_imported
    if callbacks:
        sys.meta_path.insert(0, _Finder(callbacks))


_install()
_chain_user_sitecustomize()
