package cpool

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// ErrNeedsCgo is returned by a build without cgo.
var ErrNeedsCgo = errors.New("the C pool needs cgo (build with CGO_ENABLED=1 and a C compiler)")

// Code is what the C pool answered a request that it did not serve: the CP_* codes of pool.h.
type Code uint8

// The codes of failed requests.
const (
	CodeError          Code = 1 // the upstream failed other than for memory, or the pool's own memory (mmap) did
	CodeOutOfMemory    Code = 2 // the upstream has no memory, or the arena is at its maximum
	CodeUnknownAddress Code = 3 // a free of an address where no live block of the pool starts
	CodeClosed         Code = 4 // the pool was closed
)

// String names the code as pool.h does.
func (c Code) String() string {
	switch c {
	case CodeError:
		return "CP_ERR"
	case CodeOutOfMemory:
		return "CP_OOM"
	case CodeUnknownAddress:
		return "CP_UNKNOWN"
	case CodeClosed:
		return "CP_CLOSED"
	}
	return fmt.Sprintf("code %d", uint8(c))
}

// Failure is a request of a run that the pool did not serve.
type Failure struct {
	Op   int   // index of the op in the sequence
	Code Code  // what the pool answered
	Err  error // the error a pool.Allocator would return: wraps pool.ErrOutOfMemory and the upstream's error, ...
}

// Result is what one Run did.
type Result struct {
	// Addrs holds, per op, the address of the block an allocation got or a free gave back; 0 for a
	// failed allocation, the free of a block whose allocation failed (skipped, as replay skips it)
	// and an op that asks nothing.
	Addrs []uint64
	// LatencyNs holds, per op, the time of its request alone, clock_gettime(CLOCK_MONOTONIC) read
	// before and after it in C (each includes one reading); 0 for an op that made no request. Nil
	// unless Run was asked to time each request.
	LatencyNs []int64
	// ElapsedNs is the time of the whole loop, from before the first op to after the last, read in C.
	ElapsedNs int64
	// Failures are the requests the pool did not serve, in op order.
	Failures []Failure
	// Stats and PeakStats are the pool's counters (struct cp_stats) after the last op, and as they
	// were at its peak reserved memory.
	Stats, PeakStats pool.Stats
}

// Check returns the error New would return for cfg without building a pool: ErrNeedsCgo without
// cgo, intercept.NewCPoolConfig's one-line error for a config the C pool does not implement.
func Check(cfg pool.Config) error {
	if !Available {
		return ErrNeedsCgo
	}
	_, err := intercept.NewCPoolConfig(cfg)
	return err
}

// Run builds the C pool of cfg over up, serves ops in one call (their stream indexes index
// handles, the recorded stream handles), and closes the pool. With perRequest each request is
// timed on its own (Result.LatencyNs); otherwise only the whole loop is. Blocks still live after
// the last op are given back with the pool's memory.
func Run(cfg pool.Config, ops []requests.Op, handles []uint64, up pool.Upstream, perRequest bool) (*Result, error) {
	o, err := NewOps(ops, handles)
	if err != nil {
		return nil, err
	}
	p, err := New(cfg, up)
	if err != nil {
		return nil, err
	}
	res, err := p.Run(o, perRequest)
	if cerr := p.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close the C pool: %w", cerr))
	}
	return res, err
}
