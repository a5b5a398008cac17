//go:build cuda

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/pool"
)

// These tests need an NVIDIA GPU and the CUDA driver. Build the test binary as docs/replay.md
// says (go test -c -tags cuda with the CGO flags of `make replay-cuda`) and run it on the GPU host.
// The engine's tests on the GPU are internal/replay/cuda_test.go.

func openCUDA0(t testing.TB) *Backend { return testcuda.OpenDevice0(t, Open) }

func TestCUDABackendCalls(t *testing.T) {
	b := openCUDA0(t)
	free0, total, err := b.MemGetInfo()
	if err != nil || total == 0 || free0 > total {
		t.Fatalf("MemGetInfo = %d, %d, %v", free0, total, err)
	}
	addr, err := b.Reserve(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Touch(addr+100, 2<<20, 0xa5); err != nil {
		t.Errorf("Touch: %v", err)
	}
	if err := b.Check(addr+100, 2<<20, 0xa5); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := b.Check(addr+100, 2<<20, 0x5a); err == nil || !strings.HasPrefix(err.Error(), "byte 0 of block") {
		t.Errorf("Check with the wrong pattern: err = %v", err)
	}
	if err := b.Release(addr, 3<<20); err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve(1 << 50)
	var ce *Error
	if !errors.Is(err, pool.ErrOutOfMemory) || !errors.As(err, &ce) || err.Error() != "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Reserve(1 PiB): err = %v, want cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY matching pool.ErrOutOfMemory", err)
	}
	s, err := b.CreateStream()
	if err != nil {
		t.Fatal(err)
	}
	a1, err := b.AllocAsync(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(b.FreeAsync(a1, s), b.Synchronize()); err != nil {
		t.Fatal(err)
	}
	cur, high, err := b.AsyncPoolReserved()
	if err != nil || cur == 0 || high < cur {
		t.Errorf("pool reserved %d, high %d, err %v: want the freed MiB retained", cur, high, err)
	}
	if err := errors.Join(b.DestroyStream(s), b.ResetAsyncPool()); err != nil {
		t.Fatal(err)
	}
	if cur, high, _ := b.AsyncPoolReserved(); cur != 0 || high != 0 {
		t.Errorf("after reset: reserved %d, high %d; want 0, 0", cur, high)
	}
	free, _, _ := b.MemGetInfo() // not compared: first use of memset and of the pool may keep memory
	t.Logf("free memory %d at the start, %d at the end", free0, free)
}

// TestCUDAMapperMapUnmap maps pages into reserved device address space in two calls, touches a
// block across them, unmaps a page in the middle of the first call (a sub-range of one Map, which
// needs a mapping per page), maps it again and unmaps everything in one call.
func TestCUDAMapperMapUnmap(t *testing.T) {
	b := openCUDA0(t)
	g, err := b.pageSize()
	if err != nil || g == 0 || g&(g-1) != 0 {
		t.Fatalf("granularity %d, err %v", g, err)
	}
	a, err := b.ReserveAddress(8*g + 1) // 9 pages
	if err != nil || a%g != 0 {
		t.Fatalf("ReserveAddress = %#x, %v", a, err)
	}
	if err := errors.Join(b.Map(a+g, 3*g), b.Map(a+4*g, 2*g)); err != nil {
		t.Fatal(err)
	}
	if len(b.vm.handles) != 5 || b.vm.pages.Len() != 1 {
		t.Errorf("handles %d, mapped ranges %d; want 5, 1", len(b.vm.handles), b.vm.pages.Len())
	}
	if err := b.Touch(a+g+10, 5*g-20, 0x77); err != nil {
		t.Fatalf("Touch across two Map calls: %v", err)
	}
	if err := b.Unmap(a+2*g, g); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(b.Check(a+g+10, g-10, 0x77), b.Check(a+3*g, 3*g-10, 0x77)); err != nil {
		t.Errorf("pages beside the unmapped one: %v", err)
	}
	if len(b.vm.handles) != 4 || b.vm.pages.Len() != 2 {
		t.Errorf("after unmapping one page: handles %d, mapped ranges %d; want 4, 2", len(b.vm.handles), b.vm.pages.Len())
	}
	if err := b.Map(a+2*g, g); err != nil {
		t.Fatal(err)
	}
	if err := b.Touch(a+2*g, g, 0x11); err != nil {
		t.Errorf("Touch of the page mapped again: %v", err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"map overlapping", b.Map(a, 2*g), "overlaps mapped", nil},
		{"map unaligned", b.Map(a+g/2, g), "not a non-empty multiple of the", nil},
		{"map past the reservation", b.Map(a+8*g, 2*g), "not inside reserved address space", pool.ErrUnknownAddress},
		{"unmap unmapped", b.Unmap(a+6*g, g), "not mapped", pool.ErrUnknownAddress},
		{"release mapped", b.ReleaseAddress(a, 8*g+1), "is still mapped", nil},
		{"release unknown", b.ReleaseAddress(a+g, 8*g), "no such reservation", pool.ErrUnknownAddress},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || (c.is != nil && !errors.Is(c.err, c.is)) {
			t.Errorf("%s: err = %v, want one containing %q (matching %v)", c.name, c.err, c.want, c.is)
		}
	}
	if err := b.Unmap(a+g, 5*g); err != nil {
		t.Fatalf("Unmap of pages mapped by three calls: %v", err)
	}
	if err := b.ReleaseAddress(a, 8*g+1); err != nil {
		t.Fatal(err)
	}
	if len(b.vm.handles) != 0 || b.vm.pages.Len() != 0 || b.vm.vas.Len() != 0 {
		t.Errorf("left: handles %d, mapped ranges %d, reservations %d", len(b.vm.handles), b.vm.pages.Len(), b.vm.vas.Len())
	}
}

// TestCUDAMapperRemap moves a mapped page elsewhere: the device's free memory does not change, the
// page is usable at its new place, the old place is unmapped; moving onto a mapped page or from an
// unmapped one fails.
func TestCUDAMapperRemap(t *testing.T) {
	b := openCUDA0(t)
	g, _ := b.pageSize()
	a, err := b.ReserveAddress(8 * g)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Map(a, 2*g); err != nil {
		t.Fatal(err)
	}
	free0, _, _ := b.MemGetInfo()
	if err := b.Remap(a+g, a+5*g, g); err != nil {
		t.Fatal(err)
	}
	free1, _, _ := b.MemGetInfo()
	if err := errors.Join(b.Touch(a+5*g, g, 0x5a), b.Check(a+5*g, g, 0x5a), b.Touch(a, g, 0x11)); err != nil {
		t.Errorf("pages after the remap: %v", err)
	}
	if len(b.vm.handles) != 2 || b.vm.pages.Len() != 2 || free1 != free0 {
		t.Errorf("handles %d, mapped ranges %d, free memory %d -> %d; want 2, 2, unchanged", len(b.vm.handles), b.vm.pages.Len(), free0, free1)
	}
	if err := b.Remap(a+g, a+6*g, g); err == nil || !errors.Is(err, pool.ErrUnknownAddress) {
		t.Errorf("remap of an unmapped page: %v", err)
	}
	if err := b.Remap(a, a+5*g, g); err == nil || !strings.Contains(err.Error(), "overlaps mapped") {
		t.Errorf("remap onto a mapped page: %v", err)
	}
	if err := errors.Join(b.Unmap(a, g), b.Unmap(a+5*g, g), b.ReleaseAddress(a, 8*g)); err != nil {
		t.Fatal(err)
	}
	if len(b.vm.handles) != 0 {
		t.Errorf("%d handles left", len(b.vm.handles))
	}
}

// TestCUDAMapperOutOfMemory maps more than the device has: Map fails with cuMemCreate's
// CUDA_ERROR_OUT_OF_MEMORY, which matches pool.ErrOutOfMemory, and leaves nothing mapped.
func TestCUDAMapperOutOfMemory(t *testing.T) {
	b := openCUDA0(t)
	g, err := b.pageSize()
	if err != nil {
		t.Fatal(err)
	}
	free0, total, _ := b.MemGetInfo()
	size := (total/g + 1) * g
	a, err := b.ReserveAddress(size)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Map(a, size)
	var ce *Error
	if !errors.Is(err, pool.ErrOutOfMemory) || !errors.As(err, &ce) || ce.Call != "cuMemCreate" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Map beyond the device: err = %v, want cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY matching pool.ErrOutOfMemory", err)
	}
	if len(b.vm.handles) != 0 || b.vm.pages.Len() != 0 {
		t.Errorf("after the failed Map: handles %d, mapped ranges %d; want 0, 0", len(b.vm.handles), b.vm.pages.Len())
	}
	if err := b.ReleaseAddress(a, size); err != nil {
		t.Fatal(err)
	}
	free, _, _ := b.MemGetInfo()
	t.Logf("free memory %d before, %d after the failed Map (granularity %d)", free0, free, g)
}

// TestCUDAMapperCloseFreesAll closes a backend that still has pages mapped.
func TestCUDAMapperCloseFreesAll(t *testing.T) {
	b, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := b.pageSize()
	a, err := b.ReserveAddress(4 * g)
	if err == nil {
		err = b.Map(a, 2*g)
	}
	if err := errors.Join(err, b.Close()); err != nil {
		t.Fatal(err)
	}
	if len(b.vm.handles) != 0 || b.vm.vas.Len() != 0 {
		t.Errorf("after Close: handles %d, reservations %d", len(b.vm.handles), b.vm.vas.Len())
	}
}

// BenchmarkCUDAPageCalls measures, per 2 MiB page, what the paged arena asks of the device:
// mapping a new page and unmapping it (cuMemCreate + cuMemMap + cuMemSetAccess, cuMemUnmap +
// cuMemRelease) and moving a mapped page (cuMemUnmap + cuMemMap + cuMemSetAccess), one page at a
// time (ns/op is per page) and 16 adjacent pages at a time (ns/page).
func BenchmarkCUDAPageCalls(b *testing.B) {
	be := openCUDA0(b)
	g, err := be.pageSize()
	if err != nil {
		b.Fatal(err)
	}
	const run = 16
	a, err := be.ReserveAddress(2 * run * g)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("map+unmap-16", func(b *testing.B) {
		for b.Loop() {
			if err := errors.Join(be.Map(a, run*g), be.Unmap(a, run*g)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/page")
	})
	b.Run("remap-16", func(b *testing.B) {
		if err := be.Map(a, run*g); err != nil {
			b.Fatal(err)
		}
		from, to := a, a+run*g
		for b.Loop() {
			if err := be.Remap(from, to, run*g); err != nil {
				b.Fatal(err)
			}
			from, to = to, from
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/page")
		if err := be.Unmap(from, run*g); err != nil {
			b.Fatal(err)
		}
	})
	b.Logf("one cuMemUnmap over pages mapped one by one: %d (1 yes, -1 no)", be.vm.rangeUnmap)
	b.Run("map+unmap", func(b *testing.B) {
		for b.Loop() {
			if err := errors.Join(be.Map(a, g), be.Unmap(a, g)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remap", func(b *testing.B) {
		if err := be.Map(a, g); err != nil {
			b.Fatal(err)
		}
		from, to := a, a+g
		for b.Loop() {
			if err := be.Remap(from, to, g); err != nil {
				b.Fatal(err)
			}
			from, to = to, from
		}
		if err := be.Unmap(from, g); err != nil {
			b.Fatal(err)
		}
	})
	if err := be.ReleaseAddress(a, 2*run*g); err != nil {
		b.Fatal(err)
	}
}
