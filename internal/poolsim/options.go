package poolsim

import "sync"

// Option changes how NewUpstream builds a simulated address space.
type Option func(*options)

// options are the settings the Options set.
type options struct {
	singleGoroutine bool
}

// SingleGoroutine declares that the simulated address space will be used by one goroutine at a
// time, each use ordered after the previous one, so it takes no lock: analyze's simulation, which
// replays each policy on a goroutine of its own, uses it (with pool.SingleGoroutine for the
// allocator on top).
func SingleGoroutine() Option { return func(o *options) { o.singleGoroutine = true } }

// collect applies opts to the default settings.
func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// optionalMutex is a mutex that can be switched off (SingleGoroutine): Lock and Unlock then do
// nothing. The switch is set before the owner is first used and never changes.
type optionalMutex struct {
	mu  sync.Mutex
	off bool
}

// Lock locks the mutex unless it is switched off.
func (m *optionalMutex) Lock() {
	if !m.off {
		m.mu.Lock()
	}
}

// Unlock unlocks the mutex unless it is switched off.
func (m *optionalMutex) Unlock() {
	if !m.off {
		m.mu.Unlock()
	}
}

// alignUp rounds n up to a multiple of align (above 0), as pool.AlignUp does.
func alignUp(n, align uint64) uint64 { return (n + align - 1) / align * align }
