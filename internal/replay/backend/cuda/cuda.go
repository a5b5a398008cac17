//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>

// The stream-ordered allocator and memory pools, which gorgonia.org/cu does not bind.

static CUresult allocscope_pool_setup(CUdevice dev, CUmemoryPool *pool) {
	CUresult r = cuDeviceGetDefaultMemPool(pool, dev);
	if (r != CUDA_SUCCESS) return r;
	cuuint64_t keep_all = UINT64_MAX;
	return cuMemPoolSetAttribute(*pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all);
}

static CUresult allocscope_pool_reserved(CUmemoryPool pool, cuuint64_t *current, cuuint64_t *high) {
	CUresult r = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, current);
	if (r != CUDA_SUCCESS) return r;
	return cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, high);
}

static CUresult allocscope_pool_reset(CUmemoryPool pool) {
	CUresult r = cuMemPoolTrimTo(pool, 0);
	if (r != CUDA_SUCCESS) return r;
	cuuint64_t zero = 0;
	r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
	if (r != CUDA_SUCCESS) return r;
	return cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
}

static const char *allocscope_error_name(int code) {
	const char *name = NULL;
	if (cuGetErrorName((CUresult)code, &name) != CUDA_SUCCESS || name == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return name;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/allocscope/allocscope/internal/replay/backend"
	"github.com/allocscope/allocscope/pool"
)

var _ backend.Backend = (*Backend)(nil)

func init() {
	backend.Register("cuda", func(o backend.Options) (backend.Backend, error) { return Open(o.Device) })
}

// Error is a failed CUDA driver call. Its message carries the CUDA error name, e.g.
// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY"; out-of-memory errors match pool.ErrOutOfMemory.
type Error struct {
	Call string // the driver function
	Code int    // its CUresult
	Name string // cuGetErrorName of Code
}

// Error returns the driver function and the CUDA error name, e.g. "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY".
func (e *Error) Error() string { return e.Call + ": " + e.Name }

// Is makes CUDA_ERROR_OUT_OF_MEMORY match pool.ErrOutOfMemory.
func (e *Error) Is(target error) bool {
	return target == pool.ErrOutOfMemory && e.Code == int(C.CUDA_ERROR_OUT_OF_MEMORY)
}

func cudaErr(call string, code int) error {
	if code == 0 {
		return nil
	}
	return &Error{Call: call, Code: code, Name: C.GoString(C.allocscope_error_name(C.int(code)))}
}

func check(call string, r C.CUresult) error { return cudaErr(call, int(r)) }

// cuErr turns an error of gorgonia.org/cu, whose type holds the CUresult as an int, into an
// *Error with the CUDA error name.
func cuErr(call string, err error) error {
	if err == nil {
		return nil
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		return cudaErr(call, int(v.Int()))
	}
	return fmt.Errorf("%s: %w", call, err)
}

// Backend replays on GPU memory of one device through the CUDA driver API: cuMemAlloc and
// cuMemFree (gorgonia.org/cu) for the pool's Upstream and the raw mode; cuMemAddressReserve,
// cuMemCreate and cuMemMap for the pool.Mapper that expandable segments need (mapper.go);
// cuMemAllocAsync and cuMemFreeAsync from the device's default memory pool, its release threshold
// set to the maximum (it keeps all freed memory), on streams of its own for the async mode.
//
// Open makes the device's primary context current and locks the calling goroutine to
// its OS thread; use the backend from that goroutine only, and Close it there.
type Backend struct {
	dev        cu.Device
	ctx        cu.CUContext
	pool       C.CUmemoryPool
	desc       string
	streams    map[backend.Stream]C.CUstream
	nextStream backend.Stream
	buf        []byte  // host copy of one sample; its own allocation, as cgo requires
	vm         vmState // the pool.Mapper's pages and address space (mapper.go)
}

// Open opens device ordinal device: it retains the device's primary context, makes it current and
// locks the calling goroutine to its OS thread, and sets the device's default memory pool to keep
// all freed memory (for AllocAsync).
func Open(device int) (*Backend, error) {
	runtime.LockOSThread()
	b, err := open(device)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("backend cuda: device %d: %w", device, err)
	}
	return b, nil
}

func open(device int) (*Backend, error) {
	dev, err := cu.GetDevice(device)
	if err != nil {
		return nil, cuErr("cuDeviceGet", err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, cuErr("cuDevicePrimaryCtxRetain", err)
	}
	b := &Backend{dev: dev, ctx: ctx, streams: make(map[backend.Stream]C.CUstream), buf: make([]byte, backend.SampleBytes),
		vm: newVMState()}
	if err := cuErr("cuCtxSetCurrent", cu.SetCurrentContext(ctx)); err != nil {
		return nil, err
	}
	if err := check("cuDeviceGetDefaultMemPool/cuMemPoolSetAttribute",
		C.allocscope_pool_setup(C.CUdevice(dev), &b.pool)); err != nil {
		return nil, err
	}
	name, _ := dev.Name()
	total, _ := dev.TotalMem()
	b.desc = fmt.Sprintf("backend cuda: device %d %s, %d bytes, driver API %d", device, name, total, cu.Version())
	return b, nil
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// IsHost returns false.
func (b *Backend) IsHost() bool { return false }

// Description names the device.
func (b *Backend) Description() string { return b.desc }

// Reserve allocates size bytes with cuMemAlloc.
func (b *Backend) Reserve(size uint64) (uint64, error) {
	p, err := cu.MemAlloc(int64(size))
	if err != nil {
		return 0, cuErr("cuMemAlloc", err)
	}
	return uint64(p), nil
}

// Release frees a Reserve'd region with cuMemFree.
func (b *Backend) Release(addr, size uint64) error {
	return cuErr("cuMemFree", cu.MemFree(cu.DevicePtr(addr)))
}

// CreateStream creates a blocking stream (cuStreamCreate with CU_STREAM_DEFAULT), so that work
// on the legacy default stream (cuMemsetD8 of --touch) is ordered after it.
func (b *Backend) CreateStream() (backend.Stream, error) {
	var s C.CUstream
	if err := check("cuStreamCreate", C.cuStreamCreate(&s, C.CU_STREAM_DEFAULT)); err != nil {
		return 0, err
	}
	b.nextStream++
	b.streams[b.nextStream] = s
	return b.nextStream, nil
}

// DestroyStream destroys a stream from CreateStream.
func (b *Backend) DestroyStream(s backend.Stream) error {
	cs, ok := b.streams[s]
	if !ok {
		return fmt.Errorf("backend cuda: destroy stream %d: no such stream", s)
	}
	delete(b.streams, s)
	return check("cuStreamDestroy", C.cuStreamDestroy(cs))
}

func (b *Backend) stream(s backend.Stream) (C.CUstream, error) {
	cs, ok := b.streams[s]
	if !ok {
		return nil, fmt.Errorf("backend cuda: no stream %d", s)
	}
	return cs, nil
}

// AllocAsync allocates with cuMemAllocAsync on stream s from the default pool.
func (b *Backend) AllocAsync(size uint64, s backend.Stream) (uint64, error) {
	cs, err := b.stream(s)
	if err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	if err := check("cuMemAllocAsync", C.cuMemAllocAsync(&p, C.size_t(size), cs)); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// FreeAsync frees with cuMemFreeAsync on stream s; the pool keeps the memory.
func (b *Backend) FreeAsync(addr uint64, s backend.Stream) error {
	cs, err := b.stream(s)
	if err != nil {
		return err
	}
	return check("cuMemFreeAsync", C.cuMemFreeAsync(C.CUdeviceptr(addr), cs))
}

// Synchronize waits for the device (cuCtxSynchronize).
func (b *Backend) Synchronize() error { return cuErr("cuCtxSynchronize", cu.Synchronize()) }

// AsyncPoolReserved reads the default pool's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and _HIGH.
func (b *Backend) AsyncPoolReserved() (current, high uint64, err error) {
	var cur, hi C.cuuint64_t
	if err := check("cuMemPoolGetAttribute", C.allocscope_pool_reserved(b.pool, &cur, &hi)); err != nil {
		return 0, 0, err
	}
	return uint64(cur), uint64(hi), nil
}

// ResetAsyncPool trims the default pool to nothing (cuMemPoolTrimTo 0) and resets its
// high-water marks.
func (b *Backend) ResetAsyncPool() error {
	return check("cuMemPoolTrimTo/cuMemPoolSetAttribute", C.allocscope_pool_reset(b.pool))
}

// MemGetInfo returns cuMemGetInfo.
func (b *Backend) MemGetInfo() (free, total uint64, err error) {
	f, t, err := cu.MemInfo()
	if err != nil {
		return 0, 0, cuErr("cuMemGetInfo", err)
	}
	return uint64(f), uint64(t), nil
}

// Touch sets every byte of the block to pattern (cuMemsetD8) and reads a sample back.
func (b *Backend) Touch(addr, size uint64, pattern byte) error {
	if err := cu.MemsetD8(cu.DevicePtr(addr), pattern, int64(size)); err != nil {
		return cuErr("cuMemsetD8", err)
	}
	return b.Check(addr, size, pattern)
}

// Check copies samples of the block to the host (cuMemcpyDtoH) and compares them with pattern.
func (b *Backend) Check(addr, size uint64, pattern byte) error {
	for _, r := range backend.SampleRanges(size) {
		buf := b.buf[:r[1]]
		if err := cu.MemcpyDtoH(unsafe.Pointer(&buf[0]), cu.DevicePtr(addr+r[0]), int64(r[1])); err != nil {
			return cuErr("cuMemcpyDtoH", err)
		}
		for i, v := range buf {
			if v != pattern {
				return fmt.Errorf("byte %d of block %#x (%d bytes) is %#02x, want %#02x", r[0]+uint64(i), addr, size, v, pattern)
			}
		}
	}
	return nil
}

// Close destroys the streams left, trims the pool, unmaps the Mapper's pages and frees its address
// space, releases the primary context and unlocks the goroutine from its thread.
func (b *Backend) Close() error {
	var errs []error
	for s := range b.streams {
		errs = append(errs, b.DestroyStream(s))
	}
	errs = append(errs, b.Synchronize(), b.ResetAsyncPool(), b.closeAddressSpace(), cuErr("cuDevicePrimaryCtxRelease", b.dev.ReleasePrimaryCtx()))
	runtime.UnlockOSThread()
	return errors.Join(errs...)
}
