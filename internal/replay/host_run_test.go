package replay

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
)

// page is the host page size, the unit of the host backend's mappings.
var page = uint64(unix.Getpagesize())

// bestFitConfig is a pool.json with one best-fit region of 1 MiB, reserved by New.
func bestFitConfig() pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit:    &pool.BestFitConfig{InitialBytes: 1 << 20},
		Prediction: &pool.Prediction{PeakReservedBytes: 1 << 20}}
}

func TestRunHostBackendWithRealPool(t *testing.T) {
	h := host.New(1 << 30)
	defer h.Close()
	rep, err := Run(smallTrace().extract(t), h, bestFitConfig(), Options{Repeat: 3, Verify: true, Touch: true, MaxOverhead: 200})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Fatalf("failed checks: %+v", rep.Failed())
	}
	// Alignment 512: blocks of 1024, 3072, 1024, 2048 bytes; every mmap is page-rounded.
	for _, c := range []struct {
		mode                                                 Mode
		allocs, frees, final, peakReserved, peakMemInfo, res uint64
	}{
		{ModeRaw, 12, 9, 3, 1024 + 3072 + 2048, 3 * page, 12},
		{ModePool, 12, 9, 3, 1 << 20, 1 << 20, 3},
		{ModeAsync, 12, 9, 3, 3 * page, 3 * page, 0},
	} {
		m := rep.Mode(c.mode)
		got := [...]uint64{m.Allocs, m.Frees, m.FinalFrees, m.PeakReservedBytes, m.PeakMemInfoBytes, m.UpstreamReserves,
			m.Overlaps, m.OutsideReserved, m.TouchFailures, m.Touched, m.VerifyChecks, m.Alloc.Count, m.Free.Count}
		want := [...]uint64{c.allocs, c.frees, c.final, c.peakReserved, c.peakMemInfo, c.res, 0, 0, 0, 12, 12, 12, 9}
		if got != want {
			t.Errorf("%s: got %v, want %v", c.mode, got, want)
		}
	}
	wantStats := pool.Stats{Allocs: 4, Frees: 4, PeakLiveBytes: 6000, PeakBlockBytes: 1024 + 3072 + 2048,
		ReservedBytes: 1 << 20, PeakReservedBytes: 1 << 20, UpstreamReserves: 1}
	if got := *rep.Mode(ModePool).PoolStats; got != wantStats {
		t.Errorf("pool stats = %+v\nwant %+v", got, wantStats)
	}
	if rep.Memory.LeakedBytes != 0 || mapped(h) != 0 {
		t.Errorf("leaked %d bytes, %d bytes still mapped", rep.Memory.LeakedBytes, mapped(h))
	}
}

// TestRunCallsSyncAtSynchronizingCalls replays smallTrace, whose seven cudaMalloc/cudaFree calls
// all synchronize, through the stream-ordered policy: seven Sync calls per repetition.
func TestRunCallsSyncAtSynchronizingCalls(t *testing.T) {
	h := host.New(1 << 30)
	defer h.Close()
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyStreamOrdered}
	rep, err := Run(smallTrace().extract(t), h, cfg, Options{Modes: []Mode{ModePool, ModeRaw}, Repeat: 2, MaxOverhead: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	if pl, raw := rep.Mode(ModePool), rep.Mode(ModeRaw); pl.Syncs != 14 || raw.Syncs != 0 || !rep.Passed {
		t.Errorf("syncs pool %d, raw %d, passed %v; want 14, 0, true (failed %+v)", pl.Syncs, raw.Syncs, rep.Passed, rep.Failed())
	}
}

// mapped returns the bytes the host backend has mapped now.
func mapped(h *host.Backend) uint64 {
	free, total, _ := h.MemGetInfo()
	return total - free
}
