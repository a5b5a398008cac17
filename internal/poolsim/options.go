package poolsim

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
