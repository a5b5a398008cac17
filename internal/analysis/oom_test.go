package analysis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// fragmented is a PyTorch-like trace on stream 7 that fragments a 20 MiB segment: three 5 MiB
// tensors, the first and last freed, then a 30 MiB one. Each tensor has its own callsite.
func fragmented() []trace.Event {
	b := &builder{}
	fw := func(op trace.Op, addr, size, site uint64) {
		fn := map[trace.Op]string{trace.OpAlloc: "torch.alloc", trace.OpFree: "torch.free_completed"}[op]
		b.add(trace.Event{Op: op, Layer: trace.LayerFramework, Function: fn, Address: addr, Size: size, Stream: 7,
			Callsite: site})
	}
	fw(trace.OpAlloc, 0x10000000, 5<<20, 0xa1)
	fw(trace.OpAlloc, 0x10500000, 5<<20, 0xa2)
	fw(trace.OpAlloc, 0x10a00000, 5<<20, 0xa3)
	fw(trace.OpFree, 0x10000000, 0, 0)
	fw(trace.OpFree, 0x10a00000, 0, 0)
	fw(trace.OpAlloc, 0x20000000, 30<<20, 0xb0) // seq 6: needs a 30 MiB segment
	fw(trace.OpFree, 0x20000000, 0, 0)
	fw(trace.OpFree, 0x10500000, 0, 0)
	return b.events
}

// oomAt is the report on fragmented()'s 30 MiB request when the model fails it: the 20 MiB
// segment holds 15 MiB free in two blocks (5 and 10 MiB), pinned by the 5 MiB tensor of 0xa2.
func oomAt(capacity uint64, site string) *schema.OOMReport {
	return &schema.OOMReport{Seq: 6, Device: 0, RequestedBytes: 30 << 20, DeviceFreeBytes: capacity - 20<<20,
		CapacityBytes: capacity, ReservedBytes: 20 << 20, AllocatedBytes: 5 << 20, CachedFreeBytes: 15 << 20,
		LargestFree: []schema.StreamFree{{Stream: 7, Bytes: 10 << 20}},
		Fragmented: []schema.FragmentedSegment{{Address: "0x100000000", Stream: 7, SizeBytes: 20 << 20,
			FreeBytes: 15 << 20, LargestFree: 10 << 20, PinnedBy: []schema.PinningBlock{{SizeBytes: 5 << 20, Callsite: site}},
			PinnedBlocks: 1}}}
}

// TestModelOOMExplained: within 48 MiB PyTorch's defaults fail the 30 MiB request (20 MiB held by
// the fragmented segment, 30 more do not fit); the report explains it as for a snapshot's oom and
// names expandable_segments:True, which grows the segment by one 20 MiB page (40 MiB), as the fit.
func TestModelOOMExplained(t *testing.T) {
	const capacity = 48 << 20
	r, err := Analyze([]Input{fakeInput("fragmented", fragmented())}, Options{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	tr := r.Combined
	want := oomAt(capacity, "0xa2")
	want.Simulated = &schema.SimulatedOOM{Conf: "", Failures: 1}
	want.Fits = &schema.TorchSetting{Conf: "expandable_segments:True", Settings: 1, PeakReservedBytes: 40 << 20,
		Segments: 2, SavedBytes: 10 << 20}
	if !reflect.DeepEqual(tr.OOM, want) {
		t.Errorf("oom = %+v\nwant %+v", tr.OOM, want)
	}
	if s := tr.Simulations[2]; s.Name != "pytorch" || s.Failures != 1 {
		t.Errorf("the defaults' simulation: %+v", s)
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"OUT OF MEMORY (seq 6, device 0, in the model within 48 MiB)\n",
		"  PYTORCH_CUDA_ALLOC_CONF=(defaults) fails 1 request(s); the first:\n",
		"  asked for 30 MiB with 28 MiB free on the device; PyTorch could have held 48 MiB\n",
		"  reserved 20 MiB: 5 MiB allocated, 15 MiB cached but free\n",
		"  largest free block on stream 0x7: 10 MiB\n",
		"  segment 0x100000000 (20 MiB): 15 MiB free, largest 10 MiB, pinned by 1 block(s) in use:\n",
		"         5 MiB  from 0xa2\n",
		"  would have fit: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (peak reserved 40 MiB in the model)\n",
	} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the report lacks %q", line)
		}
	}
}

// When no setting fits, the search's closest one is the model replayed; it explains nothing when it
// serves every request there, or when it is not the caching allocator.
func TestModelOOMOfTheClosest(t *testing.T) {
	open := opener(func() (Source, error) { return &fakeSource{events: fragmented(), batch: 4}, nil })
	name := func(pid uint32, id uint64) string { return fmt.Sprintf("site %d/%#x", pid, id) }
	defaultsServed := []whatif.Outcome{{Policy: whatif.Policy{Name: "pytorch"}, Stats: pool.Stats{}}}
	closest := func(conf string) *schema.TorchSearch {
		return &schema.TorchSearch{Best: []schema.TorchSetting{{Conf: conf}}}
	}
	// expandable_segments:True within 36 MiB: the 20 MiB page holding the 5 MiB tensor cannot be
	// unmapped and one more does not fit.
	r, err := explainModelOOM(open, requests.Framework, closest("expandable_segments:True"), defaultsServed, 36<<20, name)
	want := oomAt(36<<20, "site 100/0xa2")
	want.Fragmented[0].Address = fmt.Sprintf("%#x", poolsim.Base) // the segment's address space comes first
	want.Simulated = &schema.SimulatedOOM{Conf: "expandable_segments:True", Failures: 1}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Errorf("closest = %+v, %v\nwant %+v", r, err, want)
	}
	for _, c := range []struct {
		conf     string
		capacity uint64
	}{{"expandable_segments:True", 40 << 20}, {"backend:cudaMallocAsync", 36 << 20}, {"", 0}} {
		if r, err := explainModelOOM(open, requests.Framework, closest(c.conf), defaultsServed, c.capacity, name); r != nil || err != nil {
			t.Errorf("%q within %d: %+v, %v; want none", c.conf, c.capacity, r, err)
		}
	}
}

// A recorded trace's out-of-memory error is explained from the state record kept for its process
// (trace.FrameworkCapture.OOM): the capture of another pid, another device or another request
// size explains nothing, a CuPy capture is not read, and a block's callsite index the metadata
// lacks reads as no stack. A state that does not decode is an error naming the entry.
func TestExplainRecordedOOM(t *testing.T) {
	seg := torchsnap.Segment{Device: 1, Address: 0x1000, TotalSize: 4 << 20, AllocatedSize: 3 << 20, Stream: 5,
		BlockList: []torchsnap.Block{
			{Address: 0x1000, Size: 1 << 20, State: "active_allocated", Callsite: 1},
			{Address: 0x101000, Size: 1 << 20, State: "inactive"},
			{Address: 0x201000, Size: 2 << 20, State: "active_allocated", Callsite: 9}}}
	capture := func(pid uint32, dev int32, size uint64) trace.FrameworkCapture {
		state := &torchsnap.OOM{Device: dev, RequestedBytes: size, DeviceFreeBytes: 1 << 20,
			Segments: []torchsnap.Segment{seg}, Callsites: []string{"step (train.py:9)"}}
		return trace.FrameworkCapture{PID: pid, Framework: trace.FrameworkTorch, OOM: state.JSON()}
	}
	states := func(captures ...trace.FrameworkCapture) oomStates {
		t.Helper()
		st, err := newOOMStates(&infoSource{info: trace.Info{Framework: captures}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	failed := schema.Anomaly{Events: []schema.EventRef{
		{Seq: 3, PID: 7, Device: 1, Function: "cudaMalloc", Size: 64},
		{Seq: 9, PID: 7, Device: 1, Function: trace.FuncTorchOOM, Size: 2 << 20, Address: "0x100000"}}}
	want := &schema.OOMReport{Seq: 9, PID: 7, Device: 1, RequestedBytes: 2 << 20, DeviceFreeBytes: 1 << 20,
		CapacityBytes: 5 << 20, ReservedBytes: 4 << 20, AllocatedBytes: 3 << 20, CachedFreeBytes: 1 << 20,
		LargestFree: []schema.StreamFree{{Stream: 5, Bytes: 1 << 20}},
		Fragmented: []schema.FragmentedSegment{{Address: "0x1000", Stream: 5, SizeBytes: 4 << 20, FreeBytes: 1 << 20,
			LargestFree: 1 << 20, PinnedBlocks: 2, PinnedBy: []schema.PinningBlock{
				{SizeBytes: 2 << 20, Callsite: "(no stack recorded)"}, {SizeBytes: 1 << 20, Callsite: "step (train.py:9)"}}}},
		Recorded: true}
	if r := explainOOM(states(capture(6, 1, 2<<20), capture(7, 1, 2<<20)), failed, nil); !reflect.DeepEqual(r, want) {
		t.Errorf("oom = %+v\nwant %+v", r, want)
	}
	cupy := capture(7, 1, 2<<20)
	cupy.Framework = trace.FrameworkCupy
	for i, other := range []trace.FrameworkCapture{capture(6, 1, 2<<20), capture(7, 0, 2<<20), capture(7, 1, 1<<20), cupy} {
		if r := explainOOM(states(other), failed, nil); r != nil {
			t.Errorf("capture %d (%s): %+v, want none", i, other.OOM, r)
		}
	}
	bad := capture(7, 1, 2<<20)
	bad.OOM = json.RawMessage(`{"device":1,"stack":[]}`)
	_, err := newOOMStates(&infoSource{info: trace.Info{Framework: []trace.FrameworkCapture{cupy, bad}}})
	if want := `schema metadata "allocscope.framework": entry 1: oom: json: unknown field "stack"`; err == nil || err.Error() != want {
		t.Errorf("undecodable state: %v, want %s", err, want)
	}
}
