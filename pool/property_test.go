package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/allocscope/allocscope/internal/spans"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// propertyConfigs are the configs the property tests drive with random traces: every policy,
// with its main options on and off.
func propertyConfigs() map[string]Config {
	classes := []Class{{512, 64}, {1024, 32}, {4096, 16}, {65536, 8}, {1 << 20, 4}}
	sc := func(perStream bool, bf *BestFitConfig) Config {
		return Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
			Classes: classes, LargeThreshold: 1 << 20, ArenaBytes: 64 << 20, PerStream: perStream}, BestFit: bf}
	}
	return map[string]Config{
		"sizeclass":            sc(false, nil),
		"sizeclass-per-stream": sc(true, nil),
		"sizeclass-capped":     sc(false, &BestFitConfig{MaximumBytes: 96 << 20, GrowBytes: 8 << 20}),
		"sizeclass-aged": {Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
			Classes: []Class{{512, 64}, {4096, 16}}, LargeThreshold: 4096, ArenaBytes: 64 << 20, ArenaFit: FitBestAged}},
		"sizeclass-paged": {Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
			Classes: []Class{{512, 64}, {4096, 16}}, LargeThreshold: 4096, ArenaBytes: 64 << 20, ArenaFit: FitBestAged,
			ArenaPaging: &ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 24 << 20}}},
		"sizeclass-paged-grows": {Version: 1, Policy: PolicySizeClass, BestFit: &BestFitConfig{GrowBytes: 8 << 20},
			SizeClass: &SizeClassConfig{Classes: []Class{{512, 64}}, ArenaBytes: 16 << 20,
				ArenaPaging: &ArenaPaging{PageBytes: 1 << 20, BudgetBytes: 8 << 20}}},
		"sizeclass-no-plan": {Version: 1, Policy: PolicySizeClass, Alignment: 256,
			SizeClass: &SizeClassConfig{Classes: []Class{{256, 0}, {768, 0}, {8192, 0}}, GrowSlots: 3}},
		"bestfit":                {Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{InitialBytes: 32 << 20, GrowBytes: 16 << 20}},
		"bestfit-bounded":        {Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{InitialBytes: 64 << 20, MaximumBytes: 200 << 20}},
		"bestfit-bare":           {Version: 1, Policy: PolicyBestFit},
		"bestfit-aged":           {Version: 1, Policy: PolicyBestFit, BestFit: &BestFitConfig{InitialBytes: 32 << 20, GrowBytes: 16 << 20, Fit: FitBestAged}},
		"pytorch":                {Version: 1, Policy: PolicyPyTorch},
		"pytorch-max-split":      {Version: 1, Policy: PolicyPyTorch, PyTorch: &PyTorchConfig{MaxSplitSizeMB: 24}},
		"pytorch-divisions":      {Version: 1, Policy: PolicyPyTorch, PyTorch: &PyTorchConfig{RoundupPower2Divisions: 4}},
		"pytorch-capacity":       {Version: 1, Policy: PolicyPyTorch, PyTorch: &PyTorchConfig{MaxSplitSizeMB: 30, CapacityBytes: 400 << 20}},
		"pytorch-expandable":     {Version: 1, Policy: PolicyPyTorch, PyTorch: &PyTorchConfig{ExpandableSegments: true}},
		"pytorch-expandable-cap": {Version: 1, Policy: PolicyPyTorch, PyTorch: &PyTorchConfig{ExpandableSegments: true, CapacityBytes: 400 << 20}},
		"stream-ordered":         {Version: 1, Policy: PolicyStreamOrdered},
		"stream-ordered-keep":    {Version: 1, Policy: PolicyStreamOrdered, StreamOrdered: &StreamOrderedConfig{ReleaseThresholdBytes: 64 << 20}},
		"raw":                    {Version: 1, Policy: PolicyRaw},
	}
}

// checker drives an allocator and checks its invariants after every call.
type checker struct {
	t      *testing.T
	a      Allocator
	up     *poolsim.Upstream
	byAddr *spans.Tree    // live blocks as the user sees them, by address
	addrs  []uint64       // live addresses, for picking one at random
	index  map[uint64]int // address → position in addrs
	live   uint64         // requested bytes live
	fails  uint64
}

func newChecker(t *testing.T, cfg Config, capacity uint64) *checker {
	t.Helper()
	up := poolsim.NewUpstream(capacity, 256)
	a, err := New(cfg, up)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &checker{t: t, a: a, up: up, index: map[uint64]int{}, byAddr: spans.NewTree(spans.ByAddr)}
}

func (c *checker) alloc(size, stream uint64) {
	c.t.Helper()
	addr, err := c.a.Alloc(size, stream)
	if err != nil {
		if !errors.Is(err, ErrOutOfMemory) {
			c.t.Fatalf("Alloc(%d): %v", size, err)
		}
		c.fails++
		return
	}
	r := spans.Span{Addr: addr, Size: max(size, 1)} // untagged, stream 0: ordered by address alone
	if prev, ok := c.byAddr.Below(spans.Span{Addr: addr + 1}); ok && prev.End() > addr {
		c.t.Fatalf("block %#x+%d overlaps live block %#x+%d", addr, size, prev.Addr, prev.Size)
	}
	if next, ok := c.byAddr.LowerBound(spans.Span{Addr: addr}); ok && next.Addr < r.End() {
		c.t.Fatalf("block %#x+%d overlaps live block %#x+%d", addr, size, next.Addr, next.Size)
	}
	if !c.up.Contains(addr, r.Size) {
		c.t.Fatalf("block %#x+%d is not inside reserved memory", addr, size)
	}
	c.byAddr.Insert(r)
	c.index[addr] = len(c.addrs)
	c.addrs = append(c.addrs, addr)
	c.live += size
}

func (c *checker) free(i int, stream uint64) {
	c.t.Helper()
	addr := c.addrs[i]
	r, _ := c.byAddr.LowerBound(spans.Span{Addr: addr})
	before := c.a.Stats()
	if err := c.a.Free(addr, stream); err != nil {
		c.t.Fatalf("Free(%#x): %v", addr, err)
	}
	after := c.a.Stats()
	if req := before.LiveBytes - after.LiveBytes; req != r.Size && !(r.Size == 1 && req == 0) {
		c.t.Fatalf("Free(%#x) gave back %d live bytes, allocated %d", addr, req, r.Size)
	}
	if err := c.a.Free(addr, stream); !errors.Is(err, ErrUnknownAddress) {
		c.t.Fatalf("second Free(%#x) = %v, want ErrUnknownAddress", addr, err)
	}
	c.byAddr.Delete(r)
	last := c.addrs[len(c.addrs)-1]
	c.addrs[i] = last
	c.index[last] = i
	c.addrs = c.addrs[:len(c.addrs)-1]
	delete(c.index, addr)
	c.live -= before.LiveBytes - after.LiveBytes
}

// check compares the allocator's Stats with what the checker saw and with the poolsim.Upstream.
func (c *checker) check() {
	c.t.Helper()
	s, u := c.a.Stats(), c.up.Stats()
	switch {
	case s.LiveBytes != c.live:
		c.t.Fatalf("LiveBytes %d, want %d", s.LiveBytes, c.live)
	case s.LiveBlocks() != uint64(len(c.addrs)):
		c.t.Fatalf("LiveBlocks %d, want %d", s.LiveBlocks(), len(c.addrs))
	case s.Failures != c.fails:
		c.t.Fatalf("Failures %d, want %d", s.Failures, c.fails)
	case s.BlockBytes < s.LiveBytes || s.ReservedBytes < s.BlockBytes:
		c.t.Fatalf("want live %d ≤ block %d ≤ reserved %d", s.LiveBytes, s.BlockBytes, s.ReservedBytes)
	case s.PeakLiveBytes < s.LiveBytes || s.PeakBlockBytes < s.BlockBytes || s.PeakReservedBytes < s.ReservedBytes:
		c.t.Fatalf("a peak below its current value: %+v", s)
	case s.ReservedBytes != u.ReservedBytes:
		c.t.Fatalf("ReservedBytes %d, upstream holds %d", s.ReservedBytes, u.ReservedBytes)
	case s.UpstreamReserves != u.Reserves+u.Maps+u.Remaps || s.UpstreamReleases != u.Releases+u.Unmaps+u.Remaps:
		c.t.Fatalf("upstream calls %d/%d, upstream saw %d+%d+%d/%d+%d+%d", s.UpstreamReserves, s.UpstreamReleases,
			u.Reserves, u.Maps, u.Remaps, u.Releases, u.Unmaps, u.Remaps)
	}
	checkLayout(c.t, c.a)
	p := c.a.PeakStats()
	if p.ReservedBytes != s.PeakReservedBytes || p.LiveBytes > s.PeakLiveBytes {
		c.t.Fatalf("PeakStats reserved %d live %d, Stats peak reserved %d live %d", p.ReservedBytes, p.LiveBytes, s.PeakReservedBytes, s.PeakLiveBytes)
	}
}

// closeAndCheck closes the allocator and checks that the poolsim.Upstream is back to empty.
func (c *checker) closeAndCheck() {
	c.t.Helper()
	if err := c.a.Close(); err != nil {
		c.t.Fatalf("Close: %v", err)
	}
	u := c.up.Stats()
	if u.ReservedBytes != 0 || u.AddressBytes != 0 || u.Regions != 0 {
		c.t.Fatalf("after Close the upstream holds %d bytes, %d of address space, %d regions", u.ReservedBytes, u.AddressBytes, u.Regions)
	}
	if s := c.a.Stats(); s.ReservedBytes != 0 {
		c.t.Fatalf("after Close ReservedBytes = %d", s.ReservedBytes)
	}
	if _, err := c.a.Alloc(1, 0); !errors.Is(err, ErrClosed) {
		c.t.Fatalf("Alloc after Close = %v, want ErrClosed", err)
	}
}

// randomSize draws from a mix of small, medium and large requests with frequent repeats.
func randomSize(rng *rand.Rand) uint64 {
	switch r := rng.IntN(100); {
	case r < 2:
		return 0
	case r < 30:
		return []uint64{512, 4096, 100000, 1 << 20, 3 << 20, 25 << 20}[rng.IntN(6)]
	case r < 70:
		return 1 + rng.Uint64N(64<<10)
	case r < 90:
		return 1 + rng.Uint64N(4<<20)
	default:
		return 1 + rng.Uint64N(48<<20)
	}
}

// runRandomTrace drives the allocator with ops random allocations and frees on three streams.
func runRandomTrace(t *testing.T, cfg Config, seed uint64, ops int, capacity uint64) {
	c := newChecker(t, cfg, capacity)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	streams := []uint64{0, 7, 9}
	syncer, _ := c.a.(Syncer)
	for i := range ops {
		switch r := rng.IntN(100); {
		case r < 52 || len(c.addrs) == 0:
			c.alloc(randomSize(rng), streams[rng.IntN(3)])
		case r < 99 || syncer == nil:
			c.free(rng.IntN(len(c.addrs)), streams[rng.IntN(3)])
		default:
			if err := syncer.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
		if i%97 == 0 {
			c.check()
		}
		if len(c.addrs) > 300 {
			c.free(rng.IntN(len(c.addrs)), streams[rng.IntN(3)])
		}
	}
	c.check()
	for len(c.addrs) > ops/1000 {
		c.free(rng.IntN(len(c.addrs)), 0)
	}
	c.check()
	c.closeAndCheck()
}

func TestPropertyRandomTraces(t *testing.T) {
	for name, cfg := range propertyConfigs() {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/seed%d", name, seed), func(t *testing.T) {
				runRandomTrace(t, cfg, seed, 6000, 0)
			})
		}
	}
}

func TestPropertyRandomTracesUnderCapacity(t *testing.T) {
	for name, cfg := range propertyConfigs() {
		t.Run(name, func(t *testing.T) {
			runRandomTrace(t, cfg, 42, 4000, 512<<20)
		})
	}
}
