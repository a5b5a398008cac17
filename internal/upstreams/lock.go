package upstreams

import "sync"

// OptionalMutex is a mutex that can be switched off, for an allocator or upstream used by one
// goroutine at a time (the SingleGoroutine options of pool and of the simulated upstream): Lock and
// Unlock then do nothing. Off is set before the owner is first used and never changes.
type OptionalMutex struct {
	mu  sync.Mutex
	Off bool
}

// Lock locks the mutex unless it is switched off.
func (m *OptionalMutex) Lock() {
	if !m.Off {
		m.mu.Lock()
	}
}

// Unlock unlocks the mutex unless it is switched off.
func (m *OptionalMutex) Unlock() {
	if !m.Off {
		m.mu.Unlock()
	}
}
