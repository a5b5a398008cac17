// Package cpool is the C pool of `record --pool`, driven from Go for replay and tests.
//
// The LD_PRELOAD shim serves a program's cudaMalloc/cudaFree from the C pool of this directory
// (pool.h, pool.c), a C implementation of package pool's size-class policy. The shim's build
// compiles pool.c beside its own units; this package builds the same file with cgo and serves a whole op sequence with it in one call into C: the
// ops are converted once into a flat C array (NewOps), and Pool.Run runs them all, timing each
// request with clock_gettime(CLOCK_MONOTONIC) when asked, and returns every op's address and the
// ops the pool could not serve. Only the pool's upstream, its rare region reservations and
// releases, calls back into Go, into the pool.Upstream given to New (replay's metered upstream
// over any backend: host memory, or CUDA through gorgonia.org/cu). So replay measures the pool that
// users deploy, not a Go model of it.
//
// New takes the config the shim gets (intercept.NewCPoolConfig, which intercept.PoolSpec encodes)
// and refuses what the C pool does not implement with the same one-line error. A Pool is also a
// pool.Allocator, one cgo call per Alloc or Free. Without cgo the package builds, and New, NewOps,
// Check and Run return ErrNeedsCgo.
package cpool
