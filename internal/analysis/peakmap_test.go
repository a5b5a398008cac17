package analysis

import (
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// checkPeakMap checks a simulation's memory map against its peak figures (its PeakStats): the
// regions' bytes are the peak reserved bytes, the free blocks' bytes the external fragmentation,
// live block bytes minus requested bytes the internal fragmentation; the regions shown and hidden
// add up to the totals, and each region's entries tile it.
func checkPeakMap(t *testing.T, s schema.Simulation) *schema.PeakMap {
	t.Helper()
	m := s.PeakMap
	if m == nil {
		t.Fatalf("%s: no memory map", s.Name)
	}
	if m.ReservedBytes != s.PeakReservedBytes || m.FreeBytes != s.ExternalFragBytes ||
		m.LiveBytes-m.RequestedBytes != s.InternalFragBytes || m.ReservedBytes != m.LiveBytes+m.FreeBytes {
		t.Errorf("%s: map reserved %d live %d requested %d free %d; simulation peak %d, internal %d, external %d",
			s.Name, m.ReservedBytes, m.LiveBytes, m.RequestedBytes, m.FreeBytes, s.PeakReservedBytes,
			s.InternalFragBytes, s.ExternalFragBytes)
	}
	reserved, free := m.HiddenBytes, m.HiddenFreeBytes
	for _, r := range m.Shown {
		var off, live, rfree uint64
		for _, b := range r.Blocks {
			if b.Offset != off || b.LiveBytes > b.SizeBytes || b.Blocks < 1 || (b.Blocks > 1 && b.SizeBytes > 2*m.MinBlockBytes) {
				t.Fatalf("%s: region %s: entry %+v at offset %d (min block %d)", s.Name, r.Address, b, off, m.MinBlockBytes)
			}
			off, live, rfree = off+b.SizeBytes, live+b.LiveBytes, rfree+b.SizeBytes-b.LiveBytes
		}
		if off != r.SizeBytes || rfree != r.FreeBytes || r.LargestFreeBytes > r.FreeBytes {
			t.Errorf("%s: region %s of %d bytes, %d free: entries end at %d with %d free", s.Name, r.Address,
				r.SizeBytes, r.FreeBytes, off, rfree)
		}
		reserved, free = reserved+r.SizeBytes, free+r.FreeBytes
	}
	if reserved != m.ReservedBytes || free != m.FreeBytes || len(m.Shown) > mapRegions ||
		len(m.Shown) != min(m.Regions, mapRegions) {
		t.Errorf("%s: %d regions, %d shown: %d bytes, %d free; totals %d, %d", s.Name, m.Regions, len(m.Shown),
			reserved, free, m.ReservedBytes, m.FreeBytes)
	}
	return m
}

// TestPeakMapsOnBundledTraces: on the bundled H200 trace and on a PyTorch snapshot, the recommended
// pool and PyTorch's caching allocator have memory maps at their peaks that match their figures,
// with the exact regions and free bytes of their simulations; no other policy has one. On the
// recommended pool the free bytes sit in one region, in the PyTorch model in cached blocks of
// its segments, the largest a 10 MiB rest of a 20 MiB segment.
func TestPeakMapsOnBundledTraces(t *testing.T) {
	for _, c := range []struct {
		file           string
		regions        [2]int
		free, largest  [2]uint64
		namedCallsites bool
	}{
		{"../../internal/cli/analyze/bundled/pytorch-train.arrow", [2]int{1, 10}, [2]uint64{4750336, 16786432}, [2]uint64{3 << 20, 10 << 20}, false},
		{"../../testdata/torch/train.caching.snapshot.pickle.gz", [2]int{1, 8}, [2]uint64{2654720, 17050624},
			[2]uint64{1 << 20, 10 << 20}, true},
	} {
		tr := analyzeFile(t, c.file)
		maps := 0
		for i, s := range tr.Simulations {
			if s.PeakMap == nil {
				continue
			}
			maps++
			if (i == 0) == (s.Name == "pytorch") || (i > 0 && s.Name != "pytorch") {
				t.Fatalf("%s: a map for %s (simulation %d)", c.file, s.Name, i)
			}
			k := min(i, 1)
			m := checkPeakMap(t, s)
			if m.Regions != c.regions[k] || m.FreeBytes != c.free[k] || m.LargestFreeBytes != c.largest[k] {
				t.Errorf("%s: %s: %d regions, %d free, largest %d; want %d, %d, %d", c.file, s.Name, m.Regions,
					m.FreeBytes, m.LargestFreeBytes, c.regions[k], c.free[k], c.largest[k])
			}
			if named := strings.Contains(m.Shown[0].Blocks[0].Callsite, "torch_work.py"); named != c.namedCallsites {
				t.Errorf("%s: %s: first block's callsite %q", c.file, s.Name, m.Shown[0].Blocks[0].Callsite)
			}
		}
		if maps != 2 {
			t.Errorf("%s: %d memory maps, want 2", c.file, maps)
		}
	}
}

// TestPeakMapBounds: a map lists at most mapRegions regions, the largest, and merges blocks below
// its smallest size so that it keeps about mapBudget entries however many blocks are live: here
// 3,000 live blocks of 4 KiB to 40 KiB, each in its own raw region, and the size-class pool's slots.
func TestPeakMapBounds(t *testing.T) {
	b := &builder{}
	for i := range 3000 {
		b.alloc(uint64(i+1)<<24, uint64(4096*(1+i%10)), 100)
	}
	tr := analyzeEvents(t, b.events)
	for _, s := range tr.Simulations[:1] {
		m := checkPeakMap(t, s)
		entries := 0
		for _, r := range m.Shown {
			entries += len(r.Blocks)
		}
		if m.LiveBlocks != 3000 || entries > 2*mapBudget+mapRegions || entries < 100 {
			t.Errorf("%s: %d live blocks in %d entries (min block %d)", s.Name, m.LiveBlocks, entries, m.MinBlockBytes)
		}
	}
	raw := peakMapOfRaw(t, b)
	if raw.Regions != 3000 || len(raw.Shown) != mapRegions || raw.Shown[0].SizeBytes != 40960 ||
		raw.HiddenBytes+uint64(mapRegions)*40960 != raw.ReservedBytes {
		t.Errorf("raw map: %d regions, %d shown, first %s, hidden %d of %d", raw.Regions, len(raw.Shown),
			strconv.FormatUint(raw.Shown[0].SizeBytes, 10), raw.HiddenBytes, raw.ReservedBytes)
	}
}

// peakMapOfRaw is the map of the raw policy (every block its own region) on b's trace.
func peakMapOfRaw(t *testing.T, b *builder) *schema.PeakMap {
	t.Helper()
	raw := whatif.Policy{Name: "raw", Config: pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyRaw}, Map: true}
	log, _, err := requests.Decode(&fakeSource{events: b.events, batch: 100}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	outs, err := whatif.Run(log, []whatif.Policy{raw}, 0, nil, nil)
	if err != nil || outs[0].Map == nil {
		t.Fatalf("raw: %v, map %v", err, outs[0].Map)
	}
	return peakMap(outs[0].Map, func(uint32, uint64) string { return "" })
}
