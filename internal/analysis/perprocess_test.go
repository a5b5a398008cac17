package analysis

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// twoProcesses is a trace of two processes (pids 100 and 200) whose requests interleave: each
// holds four 4 KiB blocks and one 1 MiB block at once, so that merged they hold eight and two.
func twoProcesses() []trace.Event {
	b := &builder{}
	for range 2 {
		for _, pid := range []uint32{100, 200} {
			base := uint64(pid) << 24
			for i := range uint64(4) {
				b.add(trace.Event{PID: pid, Op: trace.OpAlloc, Address: base + i<<12, Size: 4096, Callsite: 0x400000})
			}
			b.add(trace.Event{PID: pid, Op: trace.OpAlloc, Address: base + 1<<20, Size: 1 << 20, Callsite: 0x400100})
		}
		for _, pid := range []uint32{100, 200} {
			base := uint64(pid) << 24
			for i := range uint64(4) {
				b.add(trace.Event{PID: pid, Op: trace.OpFree, Address: base + i<<12, Callsite: 0x500000})
			}
			b.add(trace.Event{PID: pid, Op: trace.OpFree, Address: base + 1<<20, Callsite: 0x500000})
		}
	}
	return b.events
}

// A trace of two processes gets a pool sized for one process: each class's slots and the arena
// are what one process needs (four 4 KiB slots, not the eight of both merged), --emit-config writes
// it, and the report says so.
func TestPoolSizedPerProcess(t *testing.T) {
	r, err := Analyze([]Input{fakeInput("two", twoProcesses())}, Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	pp := r.Combined.PerProcess
	if pp == nil {
		t.Fatal("no pool sized per process")
	}
	merged := []pool.Class{{Size: 4096, Slots: 8}, {Size: 1 << 20, Slots: 2}}
	one := []pool.Class{{Size: 4096, Slots: 4}, {Size: 1 << 20, Slots: 1}}
	if got := r.Combined.Config.SizeClass; !slices.Equal(got.Classes, merged) || got.ArenaBytes != 0 {
		t.Errorf("merged pool: %+v, want classes %v, no arena", got, merged)
	}
	if got := pp.Config.SizeClass; !slices.Equal(got.Classes, one) || got.ArenaBytes != 0 || got.LargeThreshold != 1<<20 {
		t.Errorf("pool per process: %+v, want classes %v, no arena, threshold 1 MiB", got, one)
	}
	if pp.MergedPlanBytes != 8*4096+2<<20 || pp.Config.PlanBytes() != 4*4096+1<<20 {
		t.Errorf("plans: merged %d, per process %d bytes", pp.MergedPlanBytes, pp.Config.PlanBytes())
	}
	if Config(r) != pp.Config || CheckFits(r, 0) != nil || !pp.Fits || pp.Processes != 2 {
		t.Errorf("Config %p, want the per-process one %p; fits %v (%v), %d processes", Config(r), pp.Config, pp.Fits, CheckFits(r, 0), pp.Processes)
	}
	var out bytes.Buffer
	if err := WriteText(&out, r); err != nil {
		t.Fatal(err)
	}
	want := "  sized per process: the largest of 2 processes: 2 classes up to 1 MiB, arena 0 B, 1 MiB reserved\n" +
		"    (each process of record --pool makes its own pool; sized over all merged: 2 MiB)\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}
}

// The PYTORCH_CUDA_ALLOC_CONF search simulates each process of a trace of several with its own
// caching allocator: two processes that each allocate and free a 3 MiB block one after the other
// each reserve a 20 MiB segment (PyTorch's kLargeBuffer for requests under 10 MiB), 40 MiB summed,
// where one allocator for both would have reused the first's segment (20 MiB).
func TestTorchSearchPerProcess(t *testing.T) {
	b := &builder{}
	for _, pid := range []uint32{100, 200} {
		b.add(trace.Event{PID: pid, Op: trace.OpAlloc, Address: uint64(pid) << 24, Size: 3 << 20, Callsite: 0x400000})
		b.add(trace.Event{PID: pid, Op: trace.OpFree, Address: uint64(pid) << 24, Callsite: 0x500000})
	}
	r, err := Analyze([]Input{fakeInput("two", b.events)}, Options{Top: 5, PyTorchSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := r.Combined.TorchSearch
	if ts == nil {
		t.Fatal("no search")
	}
	want := []schema.ProcessReserved{{PID: 100, PeakReservedBytes: 20 << 20}, {PID: 200, PeakReservedBytes: 20 << 20}}
	if d := ts.Defaults; d.PeakReservedBytes != 40<<20 || d.Segments != 2 || !slices.Equal(d.Processes, want) {
		t.Errorf("defaults: %d bytes, %d segments, processes %+v; want 40 MiB, 2, %+v", d.PeakReservedBytes, d.Segments, d.Processes, want)
	}
	for _, s := range ts.Best {
		if len(s.Processes) != 2 || s.Processes[0].PeakReservedBytes+s.Processes[1].PeakReservedBytes != s.PeakReservedBytes {
			t.Errorf("setting %q: peak %d bytes, processes %+v: not their sum", s.Conf, s.PeakReservedBytes, s.Processes)
		}
	}
}

// Within a capacity smaller than the pool sized per process (small.arrow's 26.5 TiB arena in
// 64 MiB), the analysis completes: the per-process pool does not fit, and CheckFits says so.
func TestPoolPerProcessBeyondTheCapacity(t *testing.T) {
	in := Input{Name: "small", Open: func() (Source, error) { return trace.Open("../../testdata/trace/small.arrow") }}
	r, err := Analyze([]Input{in}, Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	pp := r.Combined.PerProcess
	if pp == nil || pp.Fits || pp.Processes != 2 {
		t.Fatalf("per process: %+v, want 2 processes, not fitting", pp)
	}
	if err := CheckFits(r, 64<<20); err == nil || err.Error() != "the pool sized per process still grows or fails on some process" {
		t.Errorf("CheckFits = %v", err)
	}
}
