package replay

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/pool"
)

var page = uint64(unix.Getpagesize())

func TestHostBackendReserveReleaseAndMemInfo(t *testing.T) {
	h := NewHostBackend(10 * page)
	defer h.Close()
	a, err := h.Reserve(1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Reserve(3*page + 1)
	if err != nil {
		t.Fatal(err)
	}
	if free, total, _ := h.MemGetInfo(); free != 5*page || total != 10*page {
		t.Errorf("MemGetInfo = %d, %d; want %d, %d", free, total, 5*page, 10*page)
	}
	if _, err := h.Reserve(5*page + 1); !errors.Is(err, pool.ErrOutOfMemory) {
		t.Errorf("Reserve beyond capacity: err = %v, want ErrOutOfMemory", err)
	}
	if err := h.Release(b, 2*page); err == nil || !strings.Contains(err.Error(), "reserved with") {
		t.Errorf("Release with the wrong size: err = %v", err)
	}
	if err := h.Release(b+page, 3*page+1); !errors.Is(err, pool.ErrUnknownAddress) {
		t.Errorf("Release inside a region: err = %v, want ErrUnknownAddress", err)
	}
	if err := errors.Join(h.Release(a, 1), h.Release(b, 3*page+1)); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 10*page || h.maps.len() != 0 {
		t.Errorf("after releases: free %d, mappings %d; want %d, 0", free, h.maps.len(), 10*page)
	}
}

func TestHostBackendTouchAndCheck(t *testing.T) {
	h := NewHostBackend(0)
	defer h.Close()
	base, err := h.Reserve(4 * page)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Touch(base+100, 2*page, 0xab); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(base+100, 2*page, 0xab); err != nil {
		t.Errorf("Check after Touch: %v", err)
	}
	m, _ := h.maps.get(base)
	m.data[100+page] = 0 // the middle of the block
	err = h.Check(base+100, 2*page, 0xab)
	want := "byte 4096 of block"
	if page != 4096 || err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Check of a corrupted block: err = %v, want prefix %q", err, want)
	}
	if m.data[99] != 0 || m.data[100+2*page] != 0 {
		t.Errorf("Touch wrote outside its block")
	}
	if err := h.Touch(base+3*page, 2*page, 1); err == nil || !strings.Contains(err.Error(), "not inside a mapping") {
		t.Errorf("Touch across the end of a mapping: err = %v", err)
	}
}

func TestHostBackendAsyncRetainsPerStream(t *testing.T) {
	h := NewHostBackend(100 * page)
	defer h.Close()
	s1, _ := h.CreateStream()
	s2, _ := h.CreateStream()
	a, _ := h.AllocAsync(100, s1)
	if err := h.FreeAsync(a, s1); err != nil {
		t.Fatal(err)
	}
	b, _ := h.AllocAsync(200, s2) // other stream: new mapping
	c, _ := h.AllocAsync(300, s1) // same stream, same page-rounded size: a again
	if b == a || c != a {
		t.Errorf("a %#x, b %#x, c %#x: want b != a, c == a", a, b, c)
	}
	if cur, high, _ := h.AsyncPoolReserved(); cur != 2*page || high != 2*page {
		t.Errorf("reserved %d, high %d; want %d, %d", cur, high, 2*page, 2*page)
	}
	if err := errors.Join(h.FreeAsync(b, s2), h.FreeAsync(c, s1), h.DestroyStream(s1), h.DestroyStream(s2)); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 98*page {
		t.Errorf("free before reset = %d, want %d (the pool retains)", free, 98*page)
	}
	if err := h.ResetAsyncPool(); err != nil {
		t.Fatal(err)
	}
	cur, high, _ := h.AsyncPoolReserved()
	free, _, _ := h.MemGetInfo()
	if cur != 0 || high != 0 || free != 100*page {
		t.Errorf("after reset: reserved %d, high %d, free %d; want 0, 0, %d", cur, high, free, 100*page)
	}
	if _, err := h.AllocAsync(1, s1); err == nil {
		t.Errorf("AllocAsync on a destroyed stream succeeded")
	}
}

func TestHostBackendDescriptionSaysHost(t *testing.T) {
	h := NewHostBackend(1 << 30)
	if got := h.Description(); got != "backend host: measured HOST memory (mmap), not GPU; capacity 1073741824 bytes" {
		t.Errorf("Description = %q", got)
	}
	if h.Name() != "host" || !h.IsHost() {
		t.Errorf("Name %q, IsHost %v", h.Name(), h.IsHost())
	}
}

// bestFitConfig is a pool.json with one best-fit region of 1 MiB, reserved by New.
func bestFitConfig() pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit:    &pool.BestFitConfig{InitialBytes: 1 << 20},
		Prediction: &pool.Prediction{PeakReservedBytes: 1 << 20}}
}

func TestRunHostBackendWithRealPool(t *testing.T) {
	h := NewHostBackend(1 << 30)
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
	if rep.Memory.LeakedBytes != 0 || h.maps.len() != 0 {
		t.Errorf("leaked %d bytes, %d mappings left", rep.Memory.LeakedBytes, h.maps.len())
	}
}

// TestRunCallsSyncAtSynchronizingCalls replays smallTrace, whose seven cudaMalloc/cudaFree calls
// all synchronize, through the stream-ordered policy: seven Sync calls per repetition.
func TestRunCallsSyncAtSynchronizingCalls(t *testing.T) {
	h := NewHostBackend(1 << 30)
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

func TestHostBackendAsyncTrimsBeforeFailing(t *testing.T) {
	h := NewHostBackend(4 * page)
	defer h.Close()
	s, _ := h.CreateStream()
	a, _ := h.AllocAsync(3*page, s)
	if err := h.FreeAsync(a, s); err != nil {
		t.Fatal(err)
	}
	b, err := h.AllocAsync(2*page, s) // 3 retained + 2 > 4: the retained 3 pages are unmapped first
	if err != nil {
		t.Fatalf("AllocAsync after trim: %v", err)
	}
	if cur, high, _ := h.AsyncPoolReserved(); cur != 2*page || high != 3*page || h.maps.len() != 1 {
		t.Errorf("reserved %d, high %d, mappings %d; want %d, %d, 1", cur, high, h.maps.len(), 2*page, 3*page)
	}
	if _, err := h.AllocAsync(3*page, s); !errors.Is(err, pool.ErrOutOfMemory) {
		t.Errorf("AllocAsync beyond capacity with nothing to trim: err = %v", err)
	}
	_ = h.FreeAsync(b, s)
}
