//go:build cuda

package replay

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/replay/backend/cuda"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/pool"
)

// These tests replay on the GPU (the CUDA backend's own tests are in internal/replay/backend/cuda). They
// need an NVIDIA GPU and the CUDA driver. Build the test binary as docs/replay.md
// says (go test -c -tags cuda with the CGO flags of `make replay-cuda`) and run it on the GPU host.

func openCUDA0(t testing.TB) *cuda.Backend { return testcuda.OpenDevice0(t, cuda.Open) }

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
		h := host.New(1 << 32)
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

// TestCUDACPoolIsPoolMode replays the cpool cases on the GPU in every mode: the C pool that record
// --pool deploys, its upstream cuMemAlloc/cuMemFree through the CUDA backend, does what package
// pool does there (the same-pool check) and on the host (the same counters); it logs each trace's
// allocator time per request in every mode, the figures of the goals (cpool against raw and async).
func TestCUDACPoolIsPoolMode(t *testing.T) {
	b := openCUDA0(t)
	for _, c := range cpoolCases(t) {
		opt := Options{Modes: []Mode{ModeRaw, ModePool, ModeCPool, ModeAsync}, Repeat: 3, Verify: true, MaxOverhead: 1e9}
		gpu, err := Run(c.tr, b, c.cfg, opt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		h := host.New(1 << 44)
		opt.Modes = []Mode{ModeCPool}
		onHost, err := Run(c.tr, h, c.cfg, opt)
		h.Close()
		if err != nil {
			t.Fatalf("%s on the host: %v", c.name, err)
		}
		if !gpu.Passed {
			t.Errorf("%s: failed checks on the GPU: %+v", c.name, gpu.Failed())
		}
		if g, hs := *gpu.Mode(ModeCPool).PoolStats, *onHost.Mode(ModeCPool).PoolStats; g != hs {
			t.Errorf("%s: C pool stats on the GPU %+v\n on the host %+v", c.name, g, hs)
		}
		requests := float64(c.tr.Stats.Allocs + c.tr.Stats.Frees)
		var line []string
		for _, m := range gpu.Modes {
			line = append(line, fmt.Sprintf("%s %.1f ns", m.Mode, float64(m.AllocatorTimeNs)/requests))
		}
		t.Logf("%s: per request %s; cpool %.0f x faster than raw, %.1f x than async", c.name, strings.Join(line, ", "),
			gpu.SpeedupRawOverCPool, gpu.SpeedupAsyncOverCPool)
	}
}
