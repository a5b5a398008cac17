package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

const (
	oomSegmentsShown = 3 // fragmented segments in the report
	oomPinsShown     = 3 // blocks in use shown per segment
)

// oomStates are the caching allocator's segments an out-of-memory error can be explained from: a
// snapshot's (at the dump), or those record rebuilt from each process's history at its first
// out-of-memory error (trace.FrameworkCapture.OOM).
type oomStates struct {
	snapshot *torchsnap.Snapshot
	recorded []recordedOOM
}

// recordedOOM is what record kept of PyTorch's allocator at process pid's first out-of-memory error.
type recordedOOM struct {
	pid   uint32
	state *torchsnap.OOM
}

// newOOMStates reads the states src holds: a snapshot's segments (src is the *trace.Reader of a
// snapshot), or the recorded ones of its metadata, which must decode.
func newOOMStates(src Source) (oomStates, error) {
	st := oomStates{snapshot: torchsnap.Of(src)}
	if s, ok := src.(interface{ Info() trace.Info }); ok {
		for i, c := range s.Info().Framework {
			if c.Framework != trace.FrameworkTorch || c.OOM == nil {
				continue
			}
			o, err := torchsnap.DecodeOOM(c.OOM)
			if err != nil {
				return st, fmt.Errorf(`schema metadata "allocscope.framework": entry %d: oom: %w`, i, err)
			}
			st.recorded = append(st.recorded, recordedOOM{pid: c.PID, state: o})
		}
	}
	return st, nil
}

// at returns the segments that explain out-of-memory event ev, with the names of their blocks'
// callsites (name names a snapshot's); recorded is true for segments rebuilt by record. No segments
// when none do.
func (st oomStates) at(ev schema.EventRef, name func(uint64) string) (segs []torchsnap.Segment,
	names func(uint64) string, recorded bool) {
	if st.snapshot != nil && len(st.snapshot.Segments) > 0 {
		return st.snapshot.Segments, name, false
	}
	for _, r := range st.recorded {
		if o := r.state; r.pid == ev.PID && o.Device == ev.Device && o.RequestedBytes == ev.Size {
			return o.Segments, func(i uint64) string {
				if i == 0 || i > uint64(len(o.Callsites)) {
					return "(no stack recorded)" // an index the trace's metadata does not hold
				}
				return o.Callsites[i-1]
			}, true
		}
	}
	return nil, nil, false
}

// explainOOM explains the first out-of-memory of a PyTorch snapshot or of a recorded PyTorch
// program (anomalies' failed allocations from torch.oom) from the segments on its device then
// (oomStates.at); nil without either.
func explainOOM(states oomStates, failed schema.Anomaly, name func(uint64) string) *schema.OOMReport {
	i := slices.IndexFunc(failed.Events, func(e schema.EventRef) bool { return e.Function == trace.FuncTorchOOM })
	if i < 0 {
		return nil
	}
	ev := failed.Events[i]
	segs, names, recorded := states.at(ev, name)
	if len(segs) == 0 {
		return nil
	}
	free, _ := strconv.ParseUint(ev.Address, 0, 64) // the importer puts device_free there
	r := &schema.OOMReport{Seq: ev.Seq, PID: ev.PID, Device: ev.Device, RequestedBytes: ev.Size,
		DeviceFreeBytes: free, Recorded: recorded}
	describeSegments(r, segs, names)
	r.CapacityBytes = r.ReservedBytes + free
	return r
}

// describeSegments fills in r what the segments on r's device hold: reserved, allocated and
// cached-but-free bytes, the largest free block of each stream, and the most fragmented segments
// (the most free bytes among blocks in use) with the blocks that pin them.
func describeSegments(r *schema.OOMReport, segs []torchsnap.Segment, name func(uint64) string) {
	largest := map[uint64]uint64{}
	var frag []schema.FragmentedSegment
	for _, s := range segs {
		if s.Device != r.Device {
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
	for _, st := range slices.Sorted(maps.Keys(largest)) {
		r.LargestFree = append(r.LargestFree, schema.StreamFree{Stream: st, Bytes: largest[st]})
	}
	slices.SortStableFunc(frag, func(a, b schema.FragmentedSegment) int { return cmp.Compare(b.FreeBytes, a.FreeBytes) })
	r.Fragmented = frag[:min(oomSegmentsShown, len(frag))]
}

// fragmentation describes one segment: its free bytes, its largest free block, and the blocks in
// use that pin it, largest first.
func fragmentation(s torchsnap.Segment, name func(uint64) string) schema.FragmentedSegment {
	f := schema.FragmentedSegment{Address: fmt.Sprintf("%#x", s.Address), Stream: s.Stream, SizeBytes: s.TotalSize}
	var pins []torchsnap.Block
	for _, b := range s.BlockList {
		if b.Free() {
			f.FreeBytes += b.Size
			f.LargestFree = max(f.LargestFree, b.Size)
		} else {
			pins = append(pins, b)
		}
	}
	f.PinnedBlocks = len(pins)
	slices.SortStableFunc(pins, func(a, b torchsnap.Block) int { return cmp.Compare(b.Size, a.Size) })
	for _, b := range pins[:min(oomPinsShown, len(pins))] {
		site := "(no stack recorded)"
		if b.Callsite != 0 {
			site = name(b.Callsite)
		}
		f.PinnedBy = append(f.PinnedBy, schema.PinningBlock{SizeBytes: b.Size, Callsite: site})
	}
	return f
}

// explainModelOOM explains the first request the PyTorch model fails within the capacity: with
// PyTorch's defaults when their simulation (the what-if policy "pytorch") failed requests, then
// with the search's best setting as Fits when that fits; else with the search's closest setting
// when none fits, if it fails requests there. It replays the trace once more, that setting's
// model alone, and reads the model's segments at the failure. nil without a capacity, without
// such a failure, or when the setting is not PyTorch's caching allocator (backend:cudaMallocAsync).
func explainModelOOM(open opener, layer requests.Layer, ts *schema.TorchSearch, outs []whatif.Outcome,
	capacity uint64, name func(pid uint32, id uint64) string) (*schema.OOMReport, error) {
	if capacity == 0 {
		return nil, nil
	}
	if ts == nil {
		ts = &schema.TorchSearch{} // the search did not run
	}
	var conf string
	var fits *schema.TorchSetting
	switch i := slices.IndexFunc(outs, func(o whatif.Outcome) bool { return o.Policy.Name == "pytorch" }); {
	case i >= 0 && outs[i].Stats.Failures > 0:
		if ts.Fits {
			best := ts.Best[0]
			fits = &best
		}
	case !ts.Fits && len(ts.Best) > 0:
		conf = ts.Best[0].Conf
	default:
		return nil, nil
	}
	t, err := pool.ParseAllocConf(conf)
	if err != nil {
		return nil, nil // not the caching allocator: no segments to show
	}
	t.CapacityBytes = capacity
	probe, err := newOOMProbe(t, layer, name)
	if err != nil {
		return nil, err
	}
	if err := open.pass(nil, probe.run); err != nil {
		return nil, fmt.Errorf("replay %s for its out-of-memory: %w", render.ConfOrDefaults(conf), err)
	}
	r := probe.report
	if r != nil {
		r.Simulated = &schema.SimulatedOOM{Conf: conf, Failures: probe.alloc.Stats().Failures}
		r.Fits = fits
	}
	return r, probe.alloc.Close()
}

// oomProbe replays a trace's requests through one PyTorch model, keeping who allocated each live
// block, and explains the model's state at its first failure.
type oomProbe struct {
	alloc    pool.Allocator
	feed     *requests.Feeder
	x        *requests.Extractor
	capacity uint64
	sites    map[uint64]liveSite // live block's address → its allocation
	name     func(pid uint32, id uint64) string
	report   *schema.OOMReport // at the first failure
}

// liveSite is the process and callsite of a live block's allocation.
type liveSite struct {
	pid uint32
	id  uint64
}

func newOOMProbe(t pool.PyTorchConfig, layer requests.Layer, name func(uint32, uint64) string) (*oomProbe, error) {
	up := poolsim.NewSingleGoroutineUpstream(t.CapacityBytes, pool.DefaultAlignment)
	a, err := pool.New(pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch, PyTorch: &t}, up,
		pool.SingleGoroutine())
	if err != nil {
		return nil, fmt.Errorf("out-of-memory model: %w", err)
	}
	return &oomProbe{alloc: a, feed: requests.NewFeeder(a), x: requests.NewExtractor(layer),
		capacity: t.CapacityBytes, sites: map[uint64]liveSite{}, name: name}, nil
}

// run replays src, an event at a time, to its end (the model counts every failure).
func (p *oomProbe) run(src Source) error {
	var ops []requests.Op
	for {
		b, err := src.Next()
		for i := range b {
			ops = p.x.Append(b[i:i+1], ops[:0])
			p.serve(&b[i], ops)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// serve feeds the ops of event e to the model, an op at a time.
func (p *oomProbe) serve(e *trace.Event, ops []requests.Op) {
	handles := p.x.Handles()
	for i, o := range ops {
		if o.IsFree() {
			delete(p.sites, p.feed.Live(o.Slot))
		}
		p.feed.Feed(ops[i:i+1], handles)
		if !o.IsAlloc() {
			continue
		}
		if addr := p.feed.Live(o.Slot); addr != 0 {
			p.sites[addr] = liveSite{pid: e.PID, id: e.Callsite}
		} else if p.report == nil {
			p.report = p.explain(e, o.Size)
		}
	}
}

// explain describes the model's segments as the request of e for size bytes fails: its layout as
// torch.cuda.memory_snapshot() lists it, a segment per region.
func (p *oomProbe) explain(e *trace.Event, size uint64) *schema.OOMReport {
	var regions []pool.Region
	if l, ok := p.alloc.(pool.Layouter); ok {
		regions = l.Layout()
	}
	snap := make([]torchsnap.Segment, len(regions))
	for i, r := range regions {
		snap[i] = torchsnap.Segment{Device: e.Device, Address: r.Base, TotalSize: r.Size, Stream: r.Stream,
			Large: r.Kind != pool.RegionSmall, Expandable: r.Expandable, Blocks: len(r.Blocks)}
		for _, b := range r.Blocks {
			addr := r.Base + b.Offset
			sb := torchsnap.Block{Address: addr, Size: b.Size, RequestedSize: b.Requested, State: torchsnap.StateInactive}
			if b.Live {
				sb.State = torchsnap.StateAllocated
				snap[i].AllocatedSize += b.Size
				if p.sites[addr].id != 0 {
					sb.Callsite = addr // named through the live block's site, below
				}
			}
			snap[i].BlockList = append(snap[i].BlockList, sb)
		}
	}
	r := &schema.OOMReport{Seq: e.Seq, Device: e.Device, RequestedBytes: size, CapacityBytes: p.capacity}
	describeSegments(r, snap, func(addr uint64) string { s := p.sites[addr]; return p.name(s.pid, s.id) })
	r.DeviceFreeBytes = p.capacity - min(r.ReservedBytes, p.capacity)
	return r
}
