// Package backend is the memory a replay runs on: the Backend interface, the registry that the
// backends add themselves to when a program imports them, and what they share.
//
// The backends are packages of their own, registered by import:
//
//	import _ "github.com/allocscope/allocscope/internal/replay/backend/host" // "host": mmap'd host memory
//	import _ "github.com/allocscope/allocscope/internal/replay/backend/cuda" // "cuda": build tag cuda
//
// Open then makes a backend by name, and Default names the one to use when none is asked for.
package backend

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/allocscope/allocscope/pool"
)

// Stream is a backend's handle for a stream it created.
type Stream uint64

// Backend is the memory a replay runs on: GPU memory through the CUDA driver, or host memory from
// mmap. One implementation serves all three modes: Reserve/Release (the pool.Upstream) back both
// the pooled allocator and the raw mode (pool.PolicyRaw over the same Upstream); the async methods
// back the stream-ordered mode.
//
// A Backend is used from one goroutine at a time; the CUDA backend must be used from the goroutine
// that created it.
type Backend interface {
	// Reserve and Release get and return memory directly (cudaMalloc/cudaFree, mmap/munmap).
	pool.Upstream
	// Name is the backend's name, e.g. "cuda" or "host".
	Name() string
	// IsHost reports whether the backend measures host memory rather than GPU memory.
	IsHost() bool
	// Description is one line saying what the backend measures (device name, capacity).
	Description() string
	// CreateStream makes a stream for the stream-ordered allocations.
	CreateStream() (Stream, error)
	// DestroyStream destroys a stream made by CreateStream.
	DestroyStream(s Stream) error
	// AllocAsync allocates size bytes ordered on stream s from a pool that retains freed memory
	// (release threshold = maximum).
	AllocAsync(size uint64, s Stream) (addr uint64, err error)
	// FreeAsync frees addr, from AllocAsync, ordered on stream s; the pool keeps the memory.
	FreeAsync(addr uint64, s Stream) error
	// Synchronize waits for all work on all streams.
	Synchronize() error
	// AsyncPoolReserved returns the memory the stream-ordered pool holds now and the most it held
	// since the last ResetAsyncPool.
	AsyncPoolReserved() (current, high uint64, err error)
	// ResetAsyncPool gives all memory the stream-ordered pool holds and no block uses back, and
	// resets its high-water mark. Call it after Synchronize.
	ResetAsyncPool() error
	// MemGetInfo returns the free and total memory of the device (cuMemGetInfo).
	MemGetInfo() (free, total uint64, err error)
	// Touch writes pattern to every byte of [addr, addr+size) and reads a sample back.
	Touch(addr, size uint64, pattern byte) error
	// Check reads a sample of [addr, addr+size) and reports an error if a byte is not pattern.
	Check(addr, size uint64, pattern byte) error
	// Close releases everything the backend holds.
	Close() error
}

// Options configure the backend Open makes; each backend reads the fields that concern it.
type Options struct {
	Device            int    // CUDA device ordinal (cuda)
	HostCapacityBytes uint64 // memory the host backend may map; 0 = host.DefaultCapacity
}

var (
	mu     sync.RWMutex
	makers = map[string]func(Options) (Backend, error){}
)

// Register makes a backend available to Open under name. A backend's package calls it from its
// init function; Register panics when name is registered twice or open is nil.
func Register(name string, open func(Options) (Backend, error)) {
	mu.Lock()
	defer mu.Unlock()
	if open == nil {
		panic("backend: Register " + name + " with a nil open function")
	}
	if _, dup := makers[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	makers[name] = open
}

// Default is the backend to use when none is named: "cuda" when it is registered (a binary built
// with the cuda build tag that imports internal/replay/backend/cuda), "host" otherwise.
func Default() string {
	mu.RLock()
	defer mu.RUnlock()
	if _, ok := makers["cuda"]; ok {
		return "cuda"
	}
	return "host"
}

// Names returns the names of the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(makers))
	for n := range makers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open makes the backend registered as name. For a name that is not registered its error is
// "backend NAME: " and Unavailable's.
func Open(name string, opts Options) (Backend, error) {
	mu.RLock()
	open, ok := makers[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("backend %s: %w", name, Unavailable(name))
	}
	return open(opts)
}

// Unavailable says why this program has no backend called name, in one line that does not repeat
// the name, or returns nil when it has one: "cuda" needs the cuda build tag; any other name not
// registered is unknown, and the error lists the known names (the registered ones and cuda).
func Unavailable(name string) error {
	mu.RLock()
	defer mu.RUnlock()
	if _, ok := makers[name]; ok {
		return nil
	}
	if name == "cuda" {
		return errors.New("this binary was built without the cuda build tag (build it with `make replay-cuda`)")
	}
	known := []string{"cuda"}
	for n := range makers {
		if n != "cuda" {
			known = append(known, n)
		}
	}
	sort.Strings(known)
	return fmt.Errorf("unknown backend (known: %s)", strings.Join(known, ", "))
}

// SampleBytes is how many bytes Touch and Check read back at each of three places of a block.
const SampleBytes = 256

// SampleRanges returns the offsets and lengths Touch and Check read back: up to SampleBytes at the
// start, the middle and the end of a block of size bytes.
func SampleRanges(size uint64) [3][2]uint64 {
	n := min(size, SampleBytes)
	mid := size/2 - min(size/2, n/2)
	return [3][2]uint64{{0, n}, {mid, n}, {size - n, n}}
}
