package pool

// Option changes how New builds an allocator.
type Option func(*options)

type options struct {
	singleGoroutine bool
}

// SingleGoroutine declares that the allocator will be used by one
// goroutine at a time, each use ordered after the previous one (by a channel, a WaitGroup...), so
// it takes no lock. analyze's simulation, which replays each policy on a goroutine of its own,
// uses it; a program serving requests from several threads must not.
func SingleGoroutine() Option { return func(o *options) { o.singleGoroutine = true } }

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
