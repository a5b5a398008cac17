package replay

import (
	"errors"
	"github.com/allocscope/allocscope/internal/requests"
	"reflect"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// smallTrace is the hand-made trace most engine tests replay: peak live 6000 bytes, one block
// (C) never freed, two streams.
func smallTrace() *traceBuilder {
	b := &traceBuilder{}
	return b.alloc(0x1000, 1000, 0). // A
						alloc(0x2000, 3000, 7). // B
						free(0x1000, 0).        // A
						alloc(0x1000, 1000, 0). // C, at A's old address
						alloc(0x5000, 2000, 7). // D
						free(0x2000, 7).        // B
						free(0x5000, 7)         // D
}

func TestExtractSmallTrace(t *testing.T) {
	tr := smallTrace().extract(t)
	want := ExtractStats{Events: 7, Layer: LayerDevice, Allocs: 4, Frees: 3, LiveAtEnd: 1, LiveBytesAtEnd: 1000,
		PeakLiveBytes: 6000, PeakLiveBlocks: 3, Streams: 2, Devices: 1, Processes: 1, LargestAllocSize: 3000,
		RequestedBytes: 7000}
	if tr.Stats != want {
		t.Errorf("stats = %+v\nwant    %+v", tr.Stats, want)
	}
	// cudaMalloc and cudaFree synchronize: every op has the sync bit.
	op := requests.NewOp
	wantOps := []requests.Op{op(1000, 0, 0, true), op(3000, 1, 1, true), op(0, 0, 0, true), op(1000, 0, 0, true),
		op(2000, 2, 1, true), op(0, 1, 1, true), op(0, 2, 1, true)}
	if !reflect.DeepEqual(tr.Ops, wantOps) {
		t.Errorf("ops = %v, want %v", tr.Ops, wantOps)
	}
	if tr.Slots != 3 || len(tr.Ops) != 7 || len(tr.Warnings) != 0 || !reflect.DeepEqual(tr.Streams, []uint64{0, 7}) {
		t.Errorf("slots %d, ops %d, warnings %q, streams %v; want 3, 7, none, [0 7]", tr.Slots, len(tr.Ops), tr.Warnings, tr.Streams)
	}
}

func TestExtractSkipsAndCounts(t *testing.T) {
	b := &traceBuilder{}
	b.alloc(0x100, 64, 0)
	b.add(trace.Event{Op: trace.OpAlloc, Memory: trace.MemoryHost, Address: 0x9000, Size: 10})
	b.add(trace.Event{Op: trace.OpAlloc, Memory: trace.MemoryManaged, Address: 0xa000, Size: 10})
	b.add(trace.Event{Op: trace.OpMap, Memory: trace.MemoryVirtual, Address: 0xb000, Size: 10})
	// cuMemCreate/cuMemRelease are requests (physical memory by handle).
	b.add(trace.Event{Op: trace.OpCreate, Memory: trace.MemoryVirtual, Address: 5, Size: 10, PID: 1, Function: "cuMemCreate"})
	b.add(trace.Event{Op: trace.OpRelease, Memory: trace.MemoryVirtual, Address: 5, PID: 1, Function: "cuMemRelease"})
	b.add(trace.Event{Op: trace.OpAlloc, Address: 0, Size: 1 << 40, Result: 2, PID: 1}) // failed alloc
	b.add(trace.Event{Op: trace.OpFree, Address: 0x100, Result: 1, PID: 1})             // failed free
	b.free(0xdead, 0)                                                                   // unknown
	b.free(0, 0)                                                                        // null
	b.alloc(0x200, 0, 0)                                                                // zero size
	b.alloc(0x100, 32, 0)                                                               // 0x100 still live
	b.add(trace.Event{Op: trace.OpAlloc, Address: 0x100, Size: 8, PID: 2, Device: 1})   // other process, other device
	b.free(0x100, 0)
	tr := b.extract(t)
	want := ExtractStats{Events: 14, Layer: LayerDevice, Allocs: 4, Frees: 2, UnknownFrees: 1, FailedAllocs: 1,
		FailedFrees: 1, ZeroSizeAllocs: 1, NullFrees: 1, ImplicitFrees: 1, SkippedHost: 1, SkippedManaged: 1,
		SkippedVirtual: 1, LiveAtEnd: 1, LiveBytesAtEnd: 8, PeakLiveBytes: 74, PeakLiveBlocks: 2, Streams: 2,
		Devices: 2, Processes: 2, LargestAllocSize: 64, RequestedBytes: 114}
	if tr.Stats != want {
		t.Errorf("stats = %+v\nwant    %+v", tr.Stats, want)
	}
	if len(tr.Ops) != 7 { // 4 allocs, 2 frees, 1 inserted free
		t.Errorf("ops = %d, want 7", len(tr.Ops))
	}
	wantWarnings := []string{
		"1 frees of addresses that were not live: reported, not replayed",
		"1 failed allocations in the trace: skipped",
		"1 failed frees in the trace: skipped",
		"1 allocations of 0 bytes or at address 0: skipped",
		"1 frees of address 0: skipped",
		"1 allocations at an address that was still live: the missing free was inserted",
		"1 host (page-locked) memory events: skipped",
		"1 managed memory events: skipped",
		"1 virtual address events (cuMemAddressReserve, cuMemMap and their inverses): skipped",
		"trace allocates on 2 devices: all replayed on one device",
		"trace has 2 processes: replayed as one request stream in seq order",
	}
	if !reflect.DeepEqual(tr.Warnings, wantWarnings) {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(tr.Warnings, "\n"), strings.Join(wantWarnings, "\n"))
	}
}

func TestExtractPrefersFrameworkLayer(t *testing.T) {
	b := &traceBuilder{}
	b.alloc(0x10000, 2<<20, 0) // the framework's segment, runtime layer
	fw := func(op trace.Op, addr, size uint64) {
		b.add(trace.Event{Op: op, Layer: trace.LayerFramework, Address: addr, Size: size, PID: 1, Stream: 3})
	}
	fw(trace.OpAlloc, 0x10000, 512)
	fw(trace.OpAlloc, 0x10200, 1024)
	fw(trace.OpFreeRequested, 0x10000, 512)
	fw(trace.OpFree, 0x10000, 512)
	fw(trace.OpOOM, 0, 1<<40)
	b.free(0x10000, 0)
	tr := b.extract(t)
	want := ExtractStats{Events: 7, Layer: LayerFramework, Allocs: 2, Frees: 1, SkippedOther: 2 + 2, OOMEvents: 1,
		LiveAtEnd: 1, LiveBytesAtEnd: 1024, PeakLiveBytes: 1536, PeakLiveBlocks: 2, Streams: 1, Devices: 1,
		Processes: 1, LargestAllocSize: 1024, RequestedBytes: 1536}
	if tr.Stats != want {
		t.Errorf("stats = %+v\nwant    %+v", tr.Stats, want)
	}
}

func TestExtractReturnsSourceError(t *testing.T) {
	src := &sliceSource{events: smallTrace().events, batch: 2, err: errors.New("run.arrow: batch 3 row 1: bad op")}
	_, err := Extract(src)
	if err == nil || err.Error() != "read events: run.arrow: batch 3 row 1: bad op" {
		t.Fatalf("err = %v, want the source's error wrapped", err)
	}
}

// FuzzExtract feeds arbitrary event sequences to Extract: it never panics, and its counts add up.
func FuzzExtract(f *testing.F) {
	f.Add([]byte{1, 1, 10, 0, 2, 1, 0, 0})
	f.Add([]byte{1, 2, 200, 1, 1, 2, 3, 0, 2, 2, 0, 1, 2, 9, 0, 0, 10, 0, 5, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &traceBuilder{}
		for i := 0; i+4 <= len(data); i += 4 {
			b.add(trace.Event{Op: trace.Op(data[i] % 12), Address: uint64(data[i+1] % 8),
				Size: uint64(data[i+2]), Stream: uint64(data[i+3] % 3), Memory: trace.Memory(data[i+3] / 64),
				Layer: trace.Layer(data[i] / 128 * 2), PID: 1, Result: int32(data[i+2] % 17 / 16)})
		}
		tr, err := Extract(&sliceSource{events: b.events, batch: 5})
		if err != nil {
			t.Fatal(err)
		}
		s := tr.Stats
		requestOps := 0
		for _, o := range tr.Ops {
			if o.IsAlloc() || o.IsFree() {
				requestOps++
			}
		}
		if uint64(requestOps) != s.Allocs+s.Frees+s.ImplicitFrees || s.Events != uint64(len(b.events)) {
			t.Fatalf("ops %d != allocs %d + frees %d + implicit %d, or events %d != %d",
				requestOps, s.Allocs, s.Frees, s.ImplicitFrees, s.Events, len(b.events))
		}
		if s.Allocs != s.Frees+s.ImplicitFrees+s.LiveAtEnd {
			t.Fatalf("allocs %d != frees %d + implicit %d + live at end %d", s.Allocs, s.Frees, s.ImplicitFrees, s.LiveAtEnd)
		}
	})
}
