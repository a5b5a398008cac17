package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// The bounds of a report's memory map (schema.PeakMap).
const (
	// mapRegions is the most regions a map lists: the largest.
	mapRegions = 64
	// mapWidth and mapBudget set the smallest block a map lists alone: 1/mapWidth of the largest
	// region (a pixel of its bar, 1000 pixels wide), and at least 1/mapBudget of the bytes listed.
	// Smaller neighbours are merged into entries of about that size, so that a map has at most
	// about 2 × mapBudget + mapRegions entries.
	mapWidth  = 1000
	mapBudget = 2000
)

// peakMap is the report's form of a simulated allocator's layout at its peak: totals over every
// region, the largest regions with their blocks, small neighbouring blocks merged. name names a
// live block's callsite.
func peakMap(m *whatif.PeakMap, name func(pid uint32, id uint64) string) *schema.PeakMap {
	out := &schema.PeakMap{AtRequest: m.Calls, Regions: len(m.Regions), Shown: []schema.MapRegion{}}
	regions := slices.Clone(m.Regions)
	slices.SortStableFunc(regions, func(a, b pool.Region) int { return cmp.Compare(b.Size, a.Size) })
	for _, r := range regions {
		out.ReservedBytes += r.Size
		for _, b := range r.Blocks {
			if b.Live {
				out.LiveBytes += b.Size
				out.RequestedBytes += b.Requested
				out.LiveBlocks++
			} else {
				out.FreeBytes += b.Size
				out.LargestFreeBytes = max(out.LargestFreeBytes, b.Size)
			}
		}
	}
	shown := regions[:min(mapRegions, len(regions))]
	var shownBytes uint64
	for _, r := range shown {
		shownBytes += r.Size
	}
	if len(shown) > 0 {
		out.MinBlockBytes = max(shown[0].Size/mapWidth, shownBytes/mapBudget, 1)
	}
	for _, r := range shown {
		out.Shown = append(out.Shown, mapRegion(r, m.Sites, out.MinBlockBytes, name))
	}
	for _, r := range regions[len(shown):] {
		out.HiddenBytes += r.Size
		for _, b := range r.Blocks {
			if !b.Live {
				out.HiddenFreeBytes += b.Size
			}
		}
	}
	return out
}

// mapRegion lists region r with its blocks, those below minBytes merged with their neighbours into
// entries of about minBytes.
func mapRegion(r pool.Region, sites map[uint64]requests.Site, minBytes uint64,
	name func(uint32, uint64) string) schema.MapRegion {
	mr := schema.MapRegion{Address: fmt.Sprintf("%#x", r.Base), SizeBytes: r.Size, Kind: string(r.Kind),
		Stream: r.Stream, Expandable: r.Expandable, Blocks: []schema.MapBlock{}}
	var run mapRun
	for _, b := range r.Blocks {
		if !b.Live {
			mr.FreeBytes += b.Size
			mr.LargestFreeBytes = max(mr.LargestFreeBytes, b.Size)
		}
		if b.Size >= minBytes {
			run.flush(&mr, name)
			run.add(b, sites[r.Base+b.Offset])
			run.flush(&mr, name)
			continue
		}
		run.add(b, sites[r.Base+b.Offset])
		if run.SizeBytes >= minBytes {
			run.flush(&mr, name)
		}
	}
	run.flush(&mr, name)
	return mr
}

// mapRun is a map entry being gathered: neighbouring blocks, and the site of its largest live one.
type mapRun struct {
	schema.MapBlock
	site    requests.Site
	largest uint64 // the size of the largest live block
	mixed   bool   // blocks of several classes (or slots and other blocks)
}

// add appends block b, whose request came from site when it is live.
func (u *mapRun) add(b pool.Block, site requests.Site) {
	if u.Blocks == 0 {
		u.Offset, u.ClassBytes = b.Offset, b.Class
	}
	u.mixed = u.mixed || u.ClassBytes != b.Class
	u.Blocks++
	u.SizeBytes += b.Size
	if b.Live {
		u.LiveBytes += b.Size
		u.RequestedBytes += b.Requested
		if b.Size > u.largest {
			u.largest, u.site = b.Size, site
		}
	}
}

// flush appends the entry gathered so far to mr and starts a new one.
func (u *mapRun) flush(mr *schema.MapRegion, name func(uint32, uint64) string) {
	if u.Blocks == 0 {
		return
	}
	if u.largest > 0 && u.site.Callsite != 0 {
		u.Callsite = name(u.site.PID, u.site.Callsite)
	}
	if u.mixed {
		u.ClassBytes = 0
	}
	mr.Blocks = append(mr.Blocks, u.MapBlock)
	*u = mapRun{}
}
