// Package pool is allocscope's allocator library: device-memory allocator policies over an
// abstract address space, configured by pool.json.
//
// Every policy takes its memory in big regions from an Upstream (CUDA device memory, mmap'd host
// memory, or a simulated address space) and hands out blocks from them. The same code therefore
// predicts an allocator's behaviour offline (analyze's what-if simulation) and runs it live
// (replay, and record --pool's C pool, which follows it rule for rule).
//
// What the package promises a user:
//   - Config, its sections and LoadConfig/Save: the pool.json format (ConfigVersion), validated
//     with errors that name the field by its JSON path;
//   - New, which builds the Allocator a Config describes on an Upstream the user provides (a
//     Mapper for paged arenas and expandable segments, a Remapper to move pages, a Synchronizer
//     for deferred frees);
//   - the allocators' capabilities, found by type assertion: Deferrer, Syncer, IdleReleaser,
//     Layouter;
//   - Stats, and the errors ErrOutOfMemory, ErrUnknownAddress, ErrClosed and ErrFreedTwice,
//     returned wrapped (test them with errors.Is).
//
// All policies are deterministic: the same sequence of calls on the same Upstream gives the same
// addresses and the same Stats. All of them are safe for concurrent use unless built with
// SingleGoroutine.
//
// Package pool imports no allocscope package above it: the data structures its policies share
// are the module's internal packages spans (address space as spans, best fit), addrindex (live
// blocks and regions by address) and slots (values under small reused indexes), and upstreams
// (the errors an Upstream wraps and the rule Stats counts its calls by). The simulated address
// space (internal/poolsim) and the counting Upstream decorator (internal/poolmeter) that
// allocscope's analyze and replay put under an allocator are internal: a user brings an Upstream.
package pool

import (
	"errors"

	"github.com/allocscope/allocscope/internal/upstreams"
)

// ErrOutOfMemory is returned (wrapped) when neither the pool nor its Upstream can satisfy a request.
// An Upstream wraps it when it has no memory left.
var ErrOutOfMemory = upstreams.OutOfMemory

// ErrUnknownAddress is returned (wrapped) by Free for an address the allocator did not hand out,
// and by an Upstream for a region or range it did not hand out.
var ErrUnknownAddress = upstreams.UnknownAddress

// ErrClosed is returned (wrapped) by an allocator's methods after Close.
var ErrClosed = errors.New("allocator closed")

// Upstream is where an allocator gets and returns big regions of memory: cudaMalloc/cudaFree on a
// GPU, mmap on the host, or a simulated address space. A user of the library implements it.
type Upstream interface {
	// Reserve returns the base address of a new region of size bytes. It wraps ErrOutOfMemory
	// when the memory is not available.
	Reserve(size uint64) (addr uint64, err error)
	// Release gives back a region obtained from Reserve, with the same size.
	Release(addr, size uint64) error
}

// Mapper is an Upstream that can also reserve address space without memory and map memory into
// it page by page, as cuMemAddressReserve plus cuMemCreate/cuMemMap do. PolicyPyTorch needs one
// for expandable_segments. Map and Unmap take ranges inside one address reservation whose address
// and size are multiples of the page size the caller uses.
type Mapper interface {
	Upstream
	// ReserveAddress returns the base of size bytes of address space that hold no memory yet.
	ReserveAddress(size uint64) (addr uint64, err error)
	// ReleaseAddress gives back address space from ReserveAddress; nothing in it may be mapped.
	ReleaseAddress(addr, size uint64) error
	// Map backs [addr, addr+size) with memory. It wraps ErrOutOfMemory when none is available.
	Map(addr, size uint64) error
	// Unmap releases the memory behind [addr, addr+size), which must be mapped.
	Unmap(addr, size uint64) error
}

// Remapper is a Mapper that can move memory from one page range to another: Remap unmaps
// [from, from+size), which must be mapped, and maps the same memory at [to, to+size), which must
// not be, in one address reservation or another (contents are not kept). Memory held does not
// change, so it cannot fail for lack of it. On a GPU it is cuMemUnmap + cuMemMap +
// cuMemSetAccess of the same physical allocation, without the cuMemRelease and cuMemCreate of an
// Unmap followed by a Map. The paged arena uses it to move idle pages where a block needs them.
type Remapper interface {
	Mapper
	Remap(from, to, size uint64) error
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
	// PeakStats returns a copy of the counters taken at the moment ReservedBytes was at its
	// maximum (among such moments, the one with the most LiveBytes). Read fragmentation there.
	PeakStats() Stats
	// Close releases every region back to the Upstream; the allocator must not be used after it.
	Close() error
}

// Syncer is implemented by allocators whose behaviour depends on device synchronization
// (PolicyStreamOrdered). A simulation calls Sync where the trace shows the program synchronizing
// with the device — a synchronous cudaFree or cudaMalloc, cudaDeviceSynchronize,
// cudaStreamSynchronize — and replay calls it where it synchronizes for real.
type Syncer interface {
	// Sync tells the allocator that all work queued so far has completed.
	Sync() error
}

// Deferrer is implemented by allocators that take frees of blocks the device may still be using, as
// `record --pool` serves a synchronous cudaFree without waiting for the device (PolicySizeClass). A
// deferred block is not reused before Synced, or before the allocator would otherwise grow: then,
// when its Upstream is a Synchronizer, it synchronizes the device once (Stats.Syncs) and reuses
// every deferred block. Free takes a deferred block back at once.
type Deferrer interface {
	// FreeDeferred frees the block at addr on stream, reusable after the next synchronization. A
	// block deferred already gives an error wrapping ErrFreedTwice.
	FreeDeferred(addr, stream uint64) error
	// Synced tells the allocator that the device synchronized: every deferred block is reusable.
	Synced()
}

// Synchronizer is an Upstream that can wait for the device to finish the work queued so far.
type Synchronizer interface {
	Synchronize() error
}

// ErrFreedTwice is returned (wrapped) by FreeDeferred for a block that is deferred already.
var ErrFreedTwice = errors.New("freed twice")

// Stats are an allocator's counters. Bytes are exact.
type Stats struct {
	Allocs            uint64 `json:"allocs"`              // successful Alloc calls
	Frees             uint64 `json:"frees"`               // successful Free calls
	Failures          uint64 `json:"failures"`            // Alloc calls that returned an error
	LiveBytes         uint64 `json:"live_bytes"`          // bytes requested by blocks now live
	PeakLiveBytes     uint64 `json:"peak_live_bytes"`     // maximum of LiveBytes
	BlockBytes        uint64 `json:"block_bytes"`         // bytes of the blocks now live, after rounding
	PeakBlockBytes    uint64 `json:"peak_block_bytes"`    // maximum of BlockBytes
	ReservedBytes     uint64 `json:"reserved_bytes"`      // bytes now held from the Upstream
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // maximum of ReservedBytes
	UpstreamReserves  uint64 `json:"upstream_reserves"`   // Upstream.Reserve (or Mapper.Map) calls that succeeded
	UpstreamReleases  uint64 `json:"upstream_releases"`   // Upstream.Release (or Mapper.Unmap) calls
	UpstreamFailures  uint64 `json:"upstream_failures"`   // Upstream.Reserve (or Mapper.Map) calls that failed
	Fallbacks         uint64 `json:"fallbacks"`           // requests served outside their planned class or arena (growth beyond the plan)
	Syncs             uint64 `json:"syncs,omitempty"`     // device synchronizations made to reuse deferred frees (Deferrer)
	// IdleReleases counts the regions given back because nothing in them was in use (IdleReleaser):
	// when the Upstream was out of memory for a growth, or on ReleaseIdle. Each is also an
	// UpstreamRelease.
	IdleReleases      uint64 `json:"idle_releases,omitempty"`
	IdleReleasedBytes uint64 `json:"idle_released_bytes,omitempty"` // the bytes of those regions
}

// LiveBlocks returns the number of blocks now live.
func (s Stats) LiveBlocks() uint64 { return s.Allocs - s.Frees }

// InternalFragmentation returns the bytes lost to rounding inside live blocks: BlockBytes − LiveBytes.
func (s Stats) InternalFragmentation() uint64 { return s.BlockBytes - s.LiveBytes }

// ExternalFragmentation returns the reserved bytes that no live block covers: ReservedBytes −
// BlockBytes. Read it from PeakStats, at the moment of peak reserved memory.
func (s Stats) ExternalFragmentation() uint64 { return s.ReservedBytes - s.BlockBytes }

// UpstreamCalls returns the number of calls made to the Upstream (reserves, failed reserves and
// releases), the figure to compare with a trace's cudaMalloc/cudaFree count.
func (s Stats) UpstreamCalls() uint64 {
	return s.UpstreamReserves + s.UpstreamFailures + s.UpstreamReleases
}
