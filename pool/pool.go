// Package pool implements device-memory allocator policies over an abstract address space.
//
// Every policy takes its memory in big regions from an Upstream (simulated addresses in analyze's
// what-if simulation, mmap'd host memory or CUDA device memory in replay) and hands out blocks from
// them. The same code therefore predicts an allocator's behaviour offline and runs it live.
//
// Package pool imports no other allocscope package.
package pool

import "errors"

// ErrOutOfMemory is returned (wrapped) when neither the pool nor its Upstream can satisfy a request.
var ErrOutOfMemory = errors.New("out of memory")

// ErrUnknownAddress is returned (wrapped) by Free for an address the allocator did not hand out.
var ErrUnknownAddress = errors.New("unknown address")

// Upstream is where an allocator gets and returns big regions of memory: cudaMalloc/cudaFree on a
// GPU, mmap on the host, or a simulated address space.
type Upstream interface {
	// Reserve returns the base address of a new region of size bytes. It wraps ErrOutOfMemory
	// when the memory is not available.
	Reserve(size uint64) (addr uint64, err error)
	// Release gives back a region obtained from Reserve, with the same size.
	Release(addr, size uint64) error
}

// Allocator hands out blocks. Implementations are safe for concurrent use.
type Allocator interface {
	// Alloc returns the address of a block of at least size bytes for use on stream.
	Alloc(size uint64, stream uint64) (addr uint64, err error)
	// Free returns the block at addr, which must have come from Alloc, to the allocator. The stream
	// is the one the block is freed on (stream-ordered policies use it).
	Free(addr uint64, stream uint64) error
	// Stats returns the allocator's counters so far.
	Stats() Stats
	// Close releases every region back to the Upstream; the allocator must not be used after it.
	Close() error
}

// Stats are an allocator's counters. Bytes are exact.
type Stats struct {
	Allocs            uint64 // successful Alloc calls
	Frees             uint64 // successful Free calls
	Failures          uint64 // Alloc calls that returned an error
	LiveBytes         uint64 // bytes requested by blocks now live
	PeakLiveBytes     uint64 // maximum of LiveBytes
	BlockBytes        uint64 // bytes of the blocks now live, after rounding
	PeakBlockBytes    uint64 // maximum of BlockBytes
	ReservedBytes     uint64 // bytes now held from the Upstream
	PeakReservedBytes uint64 // maximum of ReservedBytes
	UpstreamReserves  uint64 // Upstream.Reserve calls that succeeded
	UpstreamReleases  uint64 // Upstream.Release calls
	UpstreamFailures  uint64 // Upstream.Reserve calls that failed
	Fallbacks         uint64 // requests served outside their planned class or arena (growth beyond the plan)
}
