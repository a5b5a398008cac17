package replay

import "github.com/allocscope/allocscope/internal/replay/backend"

// Stream is a backend's handle for a stream it created (backend.Stream).
type Stream = backend.Stream

// Backend is the memory a replay runs on (backend.Backend): GPU memory through the CUDA driver
// (package internal/replay/backend/cuda), or host memory from mmap (package internal/replay/backend/host).
type Backend = backend.Backend

// BackendOptions configure the backend OpenBackend makes (backend.Options).
type BackendOptions = backend.Options

// DefaultBackend is the backend used when none is named: "cuda" when the program imports
// internal/replay/backend/cuda (build tag cuda), "host" otherwise (backend.Default).
func DefaultBackend() string { return backend.Default() }

// Backends returns the names of the backends the program registered by importing their packages,
// sorted (backend.Names).
func Backends() []string { return backend.Names() }

// BackendUnavailable says why this program has no backend called name, or returns nil when it has
// one (backend.Unavailable).
func BackendUnavailable(name string) error { return backend.Unavailable(name) }

// OpenBackend makes the backend called name (backend.Open). Its package must be imported, e.g.
// internal/replay/backend/host, for it to be registered.
func OpenBackend(name string, opts BackendOptions) (Backend, error) { return backend.Open(name, opts) }
