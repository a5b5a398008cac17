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

func openCUDA0(t *testing.T) *CUDABackend {
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
