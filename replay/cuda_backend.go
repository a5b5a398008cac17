//go:build cuda

package replay

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

	"github.com/allocscope/allocscope/pool"
)

func init() {
	backendMakers["cuda"] = func(o BackendOptions) (Backend, error) { return NewCUDABackend(o.Device) }
}

// CUDAError is a failed CUDA driver call. Its message carries the CUDA error name, e.g.
// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY"; out-of-memory errors match pool.ErrOutOfMemory.
type CUDAError struct {
	Call string // the driver function
	Code int    // its CUresult
	Name string // cuGetErrorName of Code
}

func (e *CUDAError) Error() string { return e.Call + ": " + e.Name }

// Is makes CUDA_ERROR_OUT_OF_MEMORY match pool.ErrOutOfMemory.
func (e *CUDAError) Is(target error) bool {
	return target == pool.ErrOutOfMemory && e.Code == int(C.CUDA_ERROR_OUT_OF_MEMORY)
}

func cudaErr(call string, code int) error {
	if code == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: code, Name: C.GoString(C.allocscope_error_name(C.int(code)))}
}

func check(call string, r C.CUresult) error { return cudaErr(call, int(r)) }

// cuErr turns an error of gorgonia.org/cu, whose type holds the CUresult as an int, into a
// CUDAError with the CUDA error name.
func cuErr(call string, err error) error {
	if err == nil {
		return nil
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		return cudaErr(call, int(v.Int()))
	}
	return fmt.Errorf("%s: %w", call, err)
}

// CUDABackend replays on GPU memory of one device through the CUDA driver API: cuMemAlloc and
// cuMemFree (gorgonia.org/cu) for the pool's Upstream and the raw mode; cuMemAddressReserve,
// cuMemCreate and cuMemMap for the pool.Mapper that expandable segments need (cuda_mapper.go);
// cuMemAllocAsync and cuMemFreeAsync from the device's default memory pool, its release threshold
// set to the maximum (it keeps all freed memory), on streams of its own for the async mode.
//
// NewCUDABackend makes the device's primary context current and locks the calling goroutine to
// its OS thread; use the backend from that goroutine only, and Close it there.
type CUDABackend struct {
	dev        cu.Device
	ctx        cu.CUContext
	pool       C.CUmemoryPool
	desc       string
	streams    map[Stream]C.CUstream
	nextStream Stream
	buf        []byte     // host copy of one sample; its own allocation, as cgo requires
	vm         cudaMapper // the pool.Mapper's pages and address space (cuda_mapper.go)
}

// NewCUDABackend opens device ordinal device.
func NewCUDABackend(device int) (*CUDABackend, error) {
	runtime.LockOSThread()
	b, err := openCUDA(device)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("backend cuda: device %d: %w", device, err)
	}
	return b, nil
}

func openCUDA(device int) (*CUDABackend, error) {
	dev, err := cu.GetDevice(device)
	if err != nil {
		return nil, cuErr("cuDeviceGet", err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, cuErr("cuDevicePrimaryCtxRetain", err)
	}
	b := &CUDABackend{dev: dev, ctx: ctx, streams: make(map[Stream]C.CUstream), buf: make([]byte, sampleBytes),
		vm: newCUDAMapper()}
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
func (b *CUDABackend) Name() string { return "cuda" }

// IsHost returns false.
func (b *CUDABackend) IsHost() bool { return false }

// Description names the device.
func (b *CUDABackend) Description() string { return b.desc }

// Reserve allocates size bytes with cuMemAlloc.
func (b *CUDABackend) Reserve(size uint64) (uint64, error) {
	p, err := cu.MemAlloc(int64(size))
	if err != nil {
		return 0, cuErr("cuMemAlloc", err)
	}
	return uint64(p), nil
}

// Release frees a Reserve'd region with cuMemFree.
func (b *CUDABackend) Release(addr, size uint64) error {
	return cuErr("cuMemFree", cu.MemFree(cu.DevicePtr(addr)))
}

// CreateStream creates a blocking stream (cuStreamCreate with CU_STREAM_DEFAULT), so that work
// on the legacy default stream (cuMemsetD8 of --touch) is ordered after it.
func (b *CUDABackend) CreateStream() (Stream, error) {
	var s C.CUstream
	if err := check("cuStreamCreate", C.cuStreamCreate(&s, C.CU_STREAM_DEFAULT)); err != nil {
		return 0, err
	}
	b.nextStream++
	b.streams[b.nextStream] = s
	return b.nextStream, nil
}

// DestroyStream destroys a stream from CreateStream.
func (b *CUDABackend) DestroyStream(s Stream) error {
	cs, ok := b.streams[s]
	if !ok {
		return fmt.Errorf("backend cuda: destroy stream %d: no such stream", s)
	}
	delete(b.streams, s)
	return check("cuStreamDestroy", C.cuStreamDestroy(cs))
}

func (b *CUDABackend) stream(s Stream) (C.CUstream, error) {
	cs, ok := b.streams[s]
	if !ok {
		return nil, fmt.Errorf("backend cuda: no stream %d", s)
	}
	return cs, nil
}

// AllocAsync allocates with cuMemAllocAsync on stream s from the default pool.
func (b *CUDABackend) AllocAsync(size uint64, s Stream) (uint64, error) {
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
func (b *CUDABackend) FreeAsync(addr uint64, s Stream) error {
	cs, err := b.stream(s)
	if err != nil {
		return err
	}
	return check("cuMemFreeAsync", C.cuMemFreeAsync(C.CUdeviceptr(addr), cs))
}

// Synchronize waits for the device (cuCtxSynchronize).
func (b *CUDABackend) Synchronize() error { return cuErr("cuCtxSynchronize", cu.Synchronize()) }

// AsyncPoolReserved reads the default pool's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and _HIGH.
func (b *CUDABackend) AsyncPoolReserved() (current, high uint64, err error) {
	var cur, hi C.cuuint64_t
	if err := check("cuMemPoolGetAttribute", C.allocscope_pool_reserved(b.pool, &cur, &hi)); err != nil {
		return 0, 0, err
	}
	return uint64(cur), uint64(hi), nil
}

// ResetAsyncPool trims the default pool to nothing (cuMemPoolTrimTo 0) and resets its
// high-water marks.
func (b *CUDABackend) ResetAsyncPool() error {
	return check("cuMemPoolTrimTo/cuMemPoolSetAttribute", C.allocscope_pool_reset(b.pool))
}

// MemGetInfo returns cuMemGetInfo.
func (b *CUDABackend) MemGetInfo() (free, total uint64, err error) {
	f, t, err := cu.MemInfo()
	if err != nil {
		return 0, 0, cuErr("cuMemGetInfo", err)
	}
	return uint64(f), uint64(t), nil
}

// Touch sets every byte of the block to pattern (cuMemsetD8) and reads a sample back.
func (b *CUDABackend) Touch(addr, size uint64, pattern byte) error {
	if err := cu.MemsetD8(cu.DevicePtr(addr), pattern, int64(size)); err != nil {
		return cuErr("cuMemsetD8", err)
	}
	return b.Check(addr, size, pattern)
}

// Check copies samples of the block to the host (cuMemcpyDtoH) and compares them with pattern.
func (b *CUDABackend) Check(addr, size uint64, pattern byte) error {
	for _, r := range sampleRanges(size) {
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
func (b *CUDABackend) Close() error {
	var errs []error
	for s := range b.streams {
		errs = append(errs, b.DestroyStream(s))
	}
	errs = append(errs, b.Synchronize(), b.ResetAsyncPool(), b.closeAddressSpace(), cuErr("cuDevicePrimaryCtxRelease", b.dev.ReleasePrimaryCtx()))
	runtime.UnlockOSThread()
	return errors.Join(errs...)
}
