package analysis

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/allocscope/allocscope/analysis/internal/model"
	"github.com/allocscope/allocscope/trace"
)

const (
	oomSegmentsShown = 3 // fragmented segments in the report
	oomPinsShown     = 3 // blocks in use shown per segment
)

// snapshotSource is a source with a PyTorch snapshot's state (*trace.Reader of a snapshot).
type snapshotSource interface {
	Snapshot() *trace.Snapshot
}

// explainOOM explains the first out-of-memory of a PyTorch snapshot (anomalies' failed
// allocations from torch.oom) from the snapshot's segments on its device; nil without either.
func explainOOM(snap *trace.Snapshot, failed model.Anomaly, name func(uint64) string) *model.OOMReport {
	if snap == nil || len(snap.Segments) == 0 {
		return nil
	}
	i := slices.IndexFunc(failed.Events, func(e model.EventRef) bool { return e.Function == trace.FuncTorchOOM })
	if i < 0 {
		return nil
	}
	ev := failed.Events[i]
	free, _ := strconv.ParseUint(ev.Address, 0, 64) // the importer puts device_free there
	r := &model.OOMReport{Seq: ev.Seq, Device: ev.Device, RequestedBytes: ev.Size, DeviceFreeBytes: free}
	largest := map[uint64]uint64{}
	var frag []model.FragmentedSegment
	for _, s := range snap.Segments {
		if s.Device != ev.Device {
			continue
		}
		r.ReservedBytes += s.TotalSize
		r.AllocatedBytes += s.AllocatedSize
		f := fragmentation(s, name)
		largest[s.Stream] = max(largest[s.Stream], f.LargestFree)
		if f.PinnedBlocks > 0 && f.FreeBytes > 0 {
			frag = append(frag, f)
		}
	}
	r.CachedFreeBytes = r.ReservedBytes - min(r.AllocatedBytes, r.ReservedBytes)
	r.CapacityBytes = r.ReservedBytes + free
	for _, st := range slices.Sorted(maps.Keys(largest)) {
		r.LargestFree = append(r.LargestFree, model.StreamFree{Stream: st, Bytes: largest[st]})
	}
	slices.SortStableFunc(frag, func(a, b model.FragmentedSegment) int { return cmp.Compare(b.FreeBytes, a.FreeBytes) })
	r.Fragmented = frag[:min(oomSegmentsShown, len(frag))]
	return r
}

// fragmentation describes one segment: its free bytes, its largest free block, and the blocks in
// use that pin it, largest first.
func fragmentation(s trace.SnapshotSegment, name func(uint64) string) model.FragmentedSegment {
	f := model.FragmentedSegment{Address: fmt.Sprintf("%#x", s.Address), Stream: s.Stream, SizeBytes: s.TotalSize}
	var pins []trace.SnapshotBlock
	for _, b := range s.BlockList {
		if b.Free() {
			f.FreeBytes += b.Size
			f.LargestFree = max(f.LargestFree, b.Size)
		} else {
			pins = append(pins, b)
		}
	}
	f.PinnedBlocks = len(pins)
	slices.SortStableFunc(pins, func(a, b trace.SnapshotBlock) int { return cmp.Compare(b.Size, a.Size) })
	for _, b := range pins[:min(oomPinsShown, len(pins))] {
		site := "(no stack recorded)"
		if b.Callsite != 0 {
			site = name(b.Callsite)
		}
		f.PinnedBy = append(f.PinnedBy, model.PinningBlock{SizeBytes: b.Size, Callsite: site})
	}
	return f
}
