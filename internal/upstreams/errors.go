// Package upstreams holds what package pool shares with the upstreams its allocators run on: the
// sentinel errors an upstream wraps (pool exports them as its own ErrOutOfMemory and
// ErrUnknownAddress, so errors.Is holds for an error of either) and Counts, the one rule by which
// memory gained from an upstream is counted, by pool's Stats and by internal/poolmeter's Meter
// alike; AlignUp, their one rounding to an alignment or granularity; and OptionalMutex, the lock
// both switch off for single-goroutine use. It imports nothing of allocscope, so that the simulated address space of
// internal/poolsim can wrap the same errors without importing pool.
package upstreams

import "errors"

// OutOfMemory is wrapped when neither a pool nor its upstream can satisfy a request.
var OutOfMemory = errors.New("out of memory")

// UnknownAddress is wrapped for an address (or range) that was not handed out.
var UnknownAddress = errors.New("unknown address")
