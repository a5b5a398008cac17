//go:build cuda

// Package cuda is replay's CUDA backend: allocation requests replayed on the GPU memory of one
// device through the CUDA driver API (gorgonia.org/cu plus a little cgo of its own). It builds only
// with the build tag cuda and needs cuda.h and libcuda.so (see `make replay-cuda` and
// docs/replay.md). Importing the package registers the backend as "cuda" with package
// internal/replay/backend, which then makes it the default; Open makes one directly.
//
// A Backend is also the pool.Upstream a Go CUDA program gives pool.New: Reserve and Release are
// cuMemAlloc and cuMemFree, and as a pool.Mapper and pool.Remapper (cuMemAddressReserve,
// cuMemCreate, cuMemMap) it serves a pool.json with expandable segments or a paged arena too. Open
// makes the device's primary context current on the calling goroutine's thread and locks the
// goroutine to it, so use the backend and the allocator over it from that goroutine (errors
// elided):
//
//	gpu, _ := cuda.Open(0)                   // device 0
//	defer gpu.Close()                        // after a.Close
//	cfg, _ := pool.LoadConfig("pool.json")   // from analyze --emit-config pool.json run.arrow
//	a, _ := pool.New(cfg, gpu, pool.SingleGoroutine())
//	defer a.Close()
//	p, _ := a.Alloc(4<<20, uint64(stream))   // a device pointer; a.Free(p, uint64(stream)) frees it
package cuda
