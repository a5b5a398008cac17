//go:build cuda

package replay

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/pool"
)

// These tests need an NVIDIA GPU and the CUDA driver. Build the test binary as docs/replay.md
// says (go test -c -tags cuda with the CGO flags of `make replay-cuda`) and run it on the GPU host.

func openCUDA0(t testing.TB) *CUDABackend {
	t.Helper()
	b, err := NewCUDABackend(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

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
	var ce *CUDAError
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

func TestCUDASmallTraceAllModes(t *testing.T) {
	b := openCUDA0(t)
	rep, err := Run(smallTrace().extract(t), b, bestFitConfig(), Options{Repeat: 3, Verify: true, Touch: true, MaxOverhead: 200})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Errorf("failed checks: %+v (free at the start %d)", rep.Failed(), rep.Memory.StartFreeBytes)
	}
	for _, m := range rep.Modes {
		got := [...]uint64{m.Allocs, m.Frees, m.FinalFrees, m.Failures, m.Overlaps, m.OutsideReserved, m.Touched,
			m.TouchFailures, m.LeakedBytes}
		if want := [...]uint64{12, 9, 3, 0, 0, 0, 12, 0, 0}; got != want {
			t.Errorf("%s: got %v, want %v", m.Mode, got, want)
		}
		t.Logf("%s: alloc p50 %d ns p99 %d ns, free p50 %d ns, peak reserved %d, meminfo peak %d, free after each repetition %v",
			m.Mode, m.Alloc.P50Ns, m.Alloc.P99Ns, m.Free.P50Ns, m.PeakReservedBytes, m.PeakMemInfoBytes, m.FreeBytesAfterRepetition)
	}
	wantStats := pool.Stats{Allocs: 4, Frees: 4, PeakLiveBytes: 6000, PeakBlockBytes: 1024 + 3072 + 2048,
		ReservedBytes: 1 << 20, PeakReservedBytes: 1 << 20, UpstreamReserves: 1}
	if got := *rep.Mode(ModePool).PoolStats; got != wantStats {
		t.Errorf("pool stats = %+v\nwant %+v", got, wantStats)
	}
	if raw, pl := rep.Mode(ModeRaw), rep.Mode(ModePool); raw.PeakReservedBytes != 6144 || pl.PeakReservedBytes != 1<<20 ||
		pl.PeakMemInfoBytes < 1<<20 {
		t.Errorf("peak reserved raw %d, pool %d, pool meminfo %d; want 6144, %d, >= %d",
			raw.PeakReservedBytes, pl.PeakReservedBytes, pl.PeakMemInfoBytes, 1<<20, 1<<20)
	}
	if rep.Memory.LeakedBytes != 0 || rep.BackendIsHost {
		t.Errorf("leaked %d bytes, host backend %v", rep.Memory.LeakedBytes, rep.BackendIsHost)
	}
}

// TestCUDAPoolStatsEqualHost replays random traces in pool mode on the GPU and on the host: the
// pool is the same code, so its counters must be identical.
func TestCUDAPoolStatsEqualHost(t *testing.T) {
	b := openCUDA0(t)
	for name, cfg := range propertyConfigs() {
		tr := randomTrace(rand.New(rand.NewPCG(1, 7)), 300).extract(t)
		opt := Options{Modes: []Mode{ModePool}, Verify: true, Touch: true, MaxOverhead: 1e9}
		gpu, err := Run(tr, b, cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		h := NewHostBackend(1 << 32)
		host, err := Run(tr, h, cfg, opt)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !gpu.Passed {
			t.Errorf("%s: failed checks on the GPU: %+v", name, gpu.Failed())
		}
		if g, hs := *gpu.Mode(ModePool).PoolStats, *host.Mode(ModePool).PoolStats; g != hs {
			t.Errorf("%s: pool stats on the GPU %+v\n on the host %+v", name, g, hs)
		}
	}
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
	if len(b.vm.handles) != 5 || b.vm.pages.len() != 1 {
		t.Errorf("handles %d, mapped ranges %d; want 5, 1", len(b.vm.handles), b.vm.pages.len())
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
	if len(b.vm.handles) != 4 || b.vm.pages.len() != 2 {
		t.Errorf("after unmapping one page: handles %d, mapped ranges %d; want 4, 2", len(b.vm.handles), b.vm.pages.len())
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
	if len(b.vm.handles) != 0 || b.vm.pages.len() != 0 || b.vm.vas.len() != 0 {
		t.Errorf("left: handles %d, mapped ranges %d, reservations %d", len(b.vm.handles), b.vm.pages.len(), b.vm.vas.len())
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
	if len(b.vm.handles) != 2 || b.vm.pages.len() != 2 || free1 != free0 {
		t.Errorf("handles %d, mapped ranges %d, free memory %d -> %d; want 2, 2, unchanged", len(b.vm.handles), b.vm.pages.len(), free0, free1)
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
	var ce *CUDAError
	if !errors.Is(err, pool.ErrOutOfMemory) || !errors.As(err, &ce) || ce.Call != "cuMemCreate" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Map beyond the device: err = %v, want cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY matching pool.ErrOutOfMemory", err)
	}
	if len(b.vm.handles) != 0 || b.vm.pages.len() != 0 {
		t.Errorf("after the failed Map: handles %d, mapped ranges %d; want 0, 0", len(b.vm.handles), b.vm.pages.len())
	}
	if err := b.ReleaseAddress(a, size); err != nil {
		t.Fatal(err)
	}
	free, _, _ := b.MemGetInfo()
	t.Logf("free memory %d before, %d after the failed Map (granularity %d)", free0, free, g)
}

// TestCUDAMapperCloseFreesAll closes a backend that still has pages mapped.
func TestCUDAMapperCloseFreesAll(t *testing.T) {
	b, err := NewCUDABackend(0)
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
	if len(b.vm.handles) != 0 || b.vm.vas.len() != 0 {
		t.Errorf("after Close: handles %d, reservations %d", len(b.vm.handles), b.vm.vas.len())
	}
}

// TestCUDAExpandableSegmentsFollowPrediction replays the expandable-segments traces of
// expandable_test.go on the GPU, two repetitions: the pool's counters equal the simulated
// prediction exactly; the checked passes unmap 3 times each (at Close, or once before it when capped).
func TestCUDAExpandableSegmentsFollowPrediction(t *testing.T) {
	b := openCUDA0(t)
	capped := &traceBuilder{}
	capped.alloc(0x1000, 1000, 0).alloc(0x100000, 30<<20, 0).free(0x100000, 0).
		alloc(0x200000, 30<<20, 3).free(0x200000, 3).free(0x1000, 0)
	for _, c := range []struct {
		name     string
		tr       *Trace
		cfg      pool.Config
		peak     uint64
		releases uint64
	}{
		{"unbounded", expandableTrace().extract(t), expandableConfig(0), 82 << 20, 6},
		{"capped", capped.extract(t), expandableConfig(64 << 20), 42 << 20, 6},
	} {
		stats, peak := predict(t, c.tr, c.cfg)
		c.cfg.Prediction = &pool.Prediction{PeakReservedBytes: stats.PeakReservedBytes}
		rep, err := Run(c.tr, b, c.cfg, Options{Modes: []Mode{ModePool}, Repeat: 2, Verify: true, Touch: true, MaxOverhead: 100})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		pl := rep.Mode(ModePool)
		if !rep.Passed {
			t.Errorf("%s: failed checks %+v\nerrors %q", c.name, rep.Failed(), pl.Errors)
		}
		if *pl.PoolStats != stats || *pl.PoolPeakStats != peak {
			t.Errorf("%s: pool stats %+v\nprediction %+v\npeak stats %+v\nprediction %+v", c.name, *pl.PoolStats, stats, *pl.PoolPeakStats, peak)
		}
		if pl.PeakReservedBytes != c.peak || pl.UpstreamReleases != c.releases || pl.PeakMemInfoBytes < c.peak {
			t.Errorf("%s: peak reserved %d, unmaps %d, meminfo peak %d; want %d, %d, >= %d",
				c.name, pl.PeakReservedBytes, pl.UpstreamReleases, pl.PeakMemInfoBytes, c.peak, c.releases, c.peak)
		}
	}
}

// TestCUDAPagedArenaFollowsPrediction replays pagedTrace on the GPU (2 MiB pages, the device's
// granularity): the pool's counters equal the simulation exactly, pages unmapped under the budget
// are given back to the device (cuMemGetInfo's peak is the budget), nothing leaks.
func TestCUDAPagedArenaFollowsPrediction(t *testing.T) {
	b := openCUDA0(t)
	tr := pagedTrace().extract(t)
	cfg := pagedConfig()
	stats, peak := predict(t, tr, cfg)
	cfg.Prediction = &pool.Prediction{PeakReservedBytes: stats.PeakReservedBytes}
	rep, err := Run(tr, b, cfg, Options{Modes: []Mode{ModePool, ModeRaw}, Repeat: 2, Verify: true, Touch: true, MaxOverhead: 100})
	if err != nil {
		t.Fatal(err)
	}
	pl := rep.Mode(ModePool)
	if !rep.Passed {
		t.Errorf("failed checks %+v\nerrors %q", rep.Failed(), pl.Errors)
	}
	if *pl.PoolStats != stats || *pl.PoolPeakStats != peak {
		t.Errorf("pool stats %+v\nprediction %+v\npeak stats %+v\nprediction %+v", *pl.PoolStats, stats, *pl.PoolPeakStats, peak)
	}
	if pl.PeakReservedBytes != 6<<20 || pl.UpstreamReserves != 4 || pl.UpstreamReleases != 4 || pl.PeakMemInfoBytes < 6<<20 ||
		rep.Memory.LeakedBytes != 0 {
		t.Errorf("peak reserved %d, maps %d, unmaps %d, meminfo peak %d, leaked %d; want %d, 4, 4, >= %d, 0",
			pl.PeakReservedBytes, pl.UpstreamReserves, pl.UpstreamReleases, pl.PeakMemInfoBytes, rep.Memory.LeakedBytes, 6<<20, 6<<20)
	}
	t.Logf("paged arena on the GPU: meminfo peak %d bytes, pool %d ns per repetition", pl.PeakMemInfoBytes, pl.AllocatorTimeNs)
}

// TestCUDAAsyncSynchronizesAtSyncPoints replays smallTrace, whose seven cudaMalloc/cudaFree calls
// all synchronize, in async mode: cuCtxSynchronize at each of them in every checked pass, its time
// reported apart from the allocator time.
func TestCUDAAsyncSynchronizesAtSyncPoints(t *testing.T) {
	b := openCUDA0(t)
	rep, err := Run(smallTrace().extract(t), b, bestFitConfig(), Options{Modes: []Mode{ModeAsync}, Repeat: 3, Verify: true, Touch: true})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Mode(ModeAsync)
	if m.Syncs != 21 || m.SyncTimeNs <= 0 || len(m.AllocatorTimeNsByRepetition) != 3 || !rep.Passed {
		t.Errorf("syncs %d, sync time %d ns, allocator times %v, passed %v (failed %+v); want 21, > 0, 3 of them, true",
			m.Syncs, m.SyncTimeNs, m.AllocatorTimeNsByRepetition, rep.Passed, rep.Failed())
	}
	t.Logf("async: allocator time %d ns, sync time %d ns per repetition", m.AllocatorTimeNs, m.SyncTimeNs)
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
