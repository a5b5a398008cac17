package pool

import (
	"reflect"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// checkLayout checks a's Layout against its Stats: regions by address, not overlapping, each tiled
// by its blocks; region bytes = ReservedBytes, live block bytes = BlockBytes, their requests =
// LiveBytes, live blocks = LiveBlocks, free block bytes = ExternalFragmentation.
func checkLayout(t *testing.T, a Allocator) []Region {
	t.Helper()
	regions := a.(Layouter).Layout()
	s := a.Stats()
	var reserved, block, req, free, live uint64
	for i, r := range regions {
		if i > 0 && regions[i-1].Base+regions[i-1].Size > r.Base {
			t.Fatalf("region %d at %#x overlaps or precedes region %d (%#x+%d)", i, r.Base, i-1,
				regions[i-1].Base, regions[i-1].Size)
		}
		off := uint64(0)
		for j, b := range r.Blocks {
			if b.Offset != off || b.Size == 0 {
				t.Fatalf("region %#x block %d at offset %d size %d, want offset %d and a size", r.Base, j, b.Offset, b.Size, off)
			}
			off += b.Size
			if b.Live {
				block, req, live = block+b.Size, req+b.Requested, live+1
			} else {
				free += b.Size
			}
		}
		if off != r.Size {
			t.Fatalf("region %#x of %d bytes: its blocks end at %d", r.Base, r.Size, off)
		}
		reserved += r.Size
	}
	if reserved != s.ReservedBytes || block != s.BlockBytes || req != s.LiveBytes || live != s.LiveBlocks() ||
		free != s.ExternalFragmentation() {
		t.Fatalf("layout: reserved %d, blocks %d, requested %d, live %d, free %d; stats %+v", reserved, block, req,
			live, free, s)
	}
	return regions
}

// The size-class pool's layout after a hand-made sequence: the planned region holds the class
// slabs (adjacent free slots as one block) and the arena's first space, then the slab a class
// grew by and the region the arena grew by.
func TestSizeClassLayout(t *testing.T) {
	const b = poolsim.Base
	cfg := Config{Version: 1, Policy: PolicySizeClass, SizeClass: &SizeClassConfig{
		Classes: []Class{{512, 4}, {4096, 2}}, LargeThreshold: 4096, ArenaBytes: 16384, GrowSlots: 2}}
	up := poolsim.NewUpstream(0, 512)
	a := runSteps(t, cfg, up, []step{
		alloc(100, 0, b), alloc(500, 0, b+512), // class 512, slots 0 and 1
		alloc(3000, 0, b+2048),        // class 4096, slot 0
		alloc(10000, 0, b+10240),      // arena: 10240 B from its first space (16 KiB after the slabs)
		alloc(5000, 0, b+20480),       // arena: 5120 B, 1 KiB left
		free(b, 0),                    // class 512 slot 0 free again
		alloc(4000, 0, b+6144),        // class 4096, slot 1
		alloc(4000, 0, b+26624),       // class 4096 grows by a slab of 2 slots
		free(b+10240, 0),              // arena block free
		alloc(40000, 0, b+26624+8192), // arena grows by a region of 40448 B
	})
	want := []Region{
		{Base: b, Size: 26624, Kind: RegionPlan, Blocks: []Block{
			{Offset: 0, Size: 512, Class: 512},
			{Offset: 512, Size: 512, Live: true, Requested: 500, Class: 512},
			{Offset: 1024, Size: 1024, Class: 512},
			{Offset: 2048, Size: 4096, Live: true, Requested: 3000, Class: 4096},
			{Offset: 6144, Size: 4096, Live: true, Requested: 4000, Class: 4096},
			{Offset: 10240, Size: 10240},
			{Offset: 20480, Size: 5120, Live: true, Requested: 5000},
			{Offset: 25600, Size: 1024}}},
		{Base: b + 26624, Size: 8192, Kind: RegionSlab, Blocks: []Block{
			{Offset: 0, Size: 4096, Live: true, Requested: 4000, Class: 4096},
			{Offset: 4096, Size: 4096, Class: 4096}}},
		{Base: b + 34816, Size: 40448, Kind: RegionArena, Blocks: []Block{
			{Offset: 0, Size: 40448, Live: true, Requested: 40000}}},
	}
	if got := checkLayout(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("layout\n %+v\nwant\n %+v", got, want)
	}
	if s := a.Stats(); s.ReservedBytes != 75264 || s.ExternalFragmentation() != 16896 {
		t.Errorf("stats %+v", s)
	}
	closeEmpty(t, a, up)
	if got := a.(Layouter).Layout(); got != nil {
		t.Errorf("layout after Close: %+v", got)
	}
}

// PyTorch's layout after a hand-made sequence: a small segment, a large segment of stream 7 with a
// cached block on each side of a live one, and a 12 MiB segment of stream 0 holding one block.
func TestPyTorchLayout(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	a := runSteps(t, torchConfig(PyTorchConfig{}), up, []step{
		alloc(1000, 0, b), alloc(5*mib, 7, b+2*mib), alloc(3*mib, 7, b+7*mib), free(b+2*mib, 7),
		alloc(12*mib, 0, b+22*mib),
	})
	want := []Region{
		{Base: b, Size: 2 * mib, Kind: RegionSmall, Blocks: []Block{{Offset: 0, Size: 1024, Live: true, Requested: 1000},
			{Offset: 1024, Size: 2*mib - 1024}}},
		{Base: b + 2*mib, Size: 20 * mib, Kind: RegionLarge, Stream: 7, Blocks: []Block{{Offset: 0, Size: 5 * mib},
			{Offset: 5 * mib, Size: 3 * mib, Live: true, Requested: 3 * mib}, {Offset: 8 * mib, Size: 12 * mib}}},
		{Base: b + 22*mib, Size: 12 * mib, Kind: RegionLarge, Blocks: []Block{
			{Offset: 0, Size: 12 * mib, Live: true, Requested: 12 * mib}}},
	}
	if got := checkLayout(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("layout\n %+v\nwant\n %+v", got, want)
	}
	closeEmpty(t, a, up)
}

// An expandable segment is listed by its runs of mapped pages: when a request would pass the
// capacity, the whole 20 MiB page inside the segment's free block is unmapped, and the segment
// becomes two runs around the hole.
func TestPyTorchExpandableLayout(t *testing.T) {
	const b = poolsim.Base
	up := poolsim.NewUpstream(0, 2*mib)
	cfg := torchConfig(PyTorchConfig{ExpandableSegments: true, CapacityBytes: 130 * mib})
	a := runSteps(t, cfg, up, []step{
		alloc(5*mib, 0, b), alloc(50*mib, 0, b+5*mib), alloc(25*mib, 0, b+55*mib), free(b+5*mib, 0),
		alloc(60*mib, 0, b+80*mib), // 80 + 60 MiB mapped would pass 130 MiB: the free page at 20 MiB goes first
	})
	want := []Region{
		{Base: b, Size: 20 * mib, Kind: RegionLarge, Expandable: true, Blocks: []Block{
			{Offset: 0, Size: 5 * mib, Live: true, Requested: 5 * mib}, {Offset: 5 * mib, Size: 15 * mib}}},
		{Base: b + 40*mib, Size: 100 * mib, Kind: RegionLarge, Expandable: true, Blocks: []Block{
			{Offset: 0, Size: 15 * mib}, {Offset: 15 * mib, Size: 25 * mib, Live: true, Requested: 25 * mib},
			{Offset: 40 * mib, Size: 60 * mib, Live: true, Requested: 60 * mib}}},
	}
	if got := checkLayout(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("layout\n %+v\nwant\n %+v", got, want)
	}
	closeEmpty(t, a, up)
}

// Every policy's layout tiles its regions and adds up to its Stats (checkLayout), also with a
// paged arena, deferred frees and blocks freed but not yet merged.
func TestLayoutMatchesStats(t *testing.T) {
	for name, cfg := range propertyConfigs() {
		t.Run(name, func(t *testing.T) {
			c := newChecker(t, cfg, 0)
			for i := range 400 {
				size := uint64(1+i%7) * 300_000
				if i%5 == 0 {
					size = uint64(i%3+1) * 4096
				}
				c.alloc(size, uint64(i%3))
				if i%3 == 2 {
					c.free(i*7%len(c.addrs), uint64(i%2))
				}
				if i%50 == 0 {
					checkLayout(t, c.a)
				}
			}
			checkLayout(t, c.a)
			if d, ok := c.a.(Deferrer); ok && len(c.addrs) > 0 {
				if err := d.FreeDeferred(c.addrs[0], 0); err != nil {
					t.Fatal(err)
				}
				checkLayout(t, c.a) // the deferred block is still live
			}
		})
	}
}
