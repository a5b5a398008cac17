package analysis

import (
	"io"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolactivity"
	"github.com/allocscope/allocscope/trace"
)

// sliceSource yields events in one batch.
type sliceSource struct {
	events []trace.Event
	done   bool
}

func (s *sliceSource) Next() ([]trace.Event, error) {
	if s.done {
		return nil, io.EOF
	}
	s.done = true
	return s.events, nil
}

// A program before and after record --pool: two requests each, the pool's 10 times faster; a host
// allocation counts in all calls but not in the requests.
func TestCompare(t *testing.T) {
	ev := func(seq uint64, op trace.Op, mem trace.Memory, addr, size uint64, at, dur int64, pool bool) trace.Event {
		return trace.Event{Seq: seq, Op: op, Memory: mem, Layer: trace.LayerRuntime, Function: "cudaMalloc",
			Address: addr, Size: size, TimeNs: at, DurationNs: dur, Pool: pool}
	}
	before := []trace.Event{ev(0, trace.OpAlloc, trace.MemoryDevice, 0x1000, 4096, 1000, 60000, false),
		ev(1, trace.OpFree, trace.MemoryDevice, 0x1000, 4096, 100000, 40000, false),
		ev(2, trace.OpAlloc, trace.MemoryHost, 0x9000, 64, 200000, 5000, false)}
	after := []trace.Event{ev(0, trace.OpAlloc, trace.MemoryDevice, 0x1000, 4096, 1000, 6000, true),
		ev(1, trace.OpFree, trace.MemoryDevice, 0x1000, 4096, 50000, 4000, true),
		ev(2, trace.OpAlloc, trace.MemoryHost, 0x9000, 64, 60000, 5000, false)}
	b, err := Measure("before.arrow", &sliceSource{events: before})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Measure("after.arrow", &sliceSource{events: after})
	if err != nil {
		t.Fatal(err)
	}
	want := Run{Name: "after.arrow", Events: 3, Requests: 2, RequestCallNs: 10000, AllCallNs: 15000, PoolServed: 2,
		PeakLiveBytes: 4096, WallNs: 64000, Layer: "device"}
	if a != want {
		t.Errorf("after: %+v\nwant   %+v", a, want)
	}
	var out strings.Builder
	if err := WriteComparison(&out, b, a); err != nil {
		t.Fatal(err)
	}
	wantText := `before: before.arrow
after:  after.arrow

                               before                 after
events                         3                      3
requests (device)              2                      2
served by the pool             0                      2
time inside the requests       100 µs                 10 µs                  10.0x less
  per request                  50 µs                  5 µs
time inside all calls          105 µs                 15 µs                  7.0x less
wall time, first to last call  204 µs                 64 µs                  3.2x less
peak live                      4 KiB                  4 KiB
`
	if out.String() != wantText {
		t.Errorf("comparison:\n%s\nwant:\n%s", out.String(), wantText)
	}
}

// With record --pool's activity in the after trace, the comparison adds its lines ("-" before).
func TestComparePoolActivity(t *testing.T) {
	before := Run{Name: "before.arrow", Layer: "device"}
	after := Run{Name: "after.arrow", Layer: "device", Pool: &poolactivity.Activity{Syncs: 2, SyncNs: 1500000,
		Reservations: 3, Fallbacks: 2, PassedThrough: 1, StreamWaits: 4, HostWaits: 5, PeakReservedBytes: 3 << 30,
		IPCExports: 1, Barriers: 1}}
	var out strings.Builder
	if err := WriteComparison(&out, before, after); err != nil {
		t.Fatal(err)
	}
	want := `pool: peak reserved            -                      3 GiB
pool: reservations             -                      3
pool: fallbacks (growths)      -                      2
pool: requests passed to CUDA  -                      1
pool: its own synchronizations -                      2 (1.5 ms)
pool: of them barriers         -                      1
pool: stream / host waits      -                      4 / 5
pool: blocks exported by IPC   -                      1
`
	if got := out.String(); !strings.HasSuffix(got, "peak live                      0 B                    0 B\n"+want) {
		t.Errorf("comparison:\n%s\nwant it to end with:\n%s", got, want)
	}
}

// With record --pool's pools in several processes, the comparison's peak reserved is the sum of each
// pool's own peak, labelled so, and the largest pool's follows.
func TestComparePoolActivitySeveralPools(t *testing.T) {
	before := Run{Name: "before.arrow", Layer: "device", Pool: &poolactivity.Activity{Reservations: 1, PeakReservedBytes: 1 << 30}}
	after := Run{Name: "after.arrow", Layer: "device", Pool: &poolactivity.Activity{Reservations: 2, PeakReservedBytes: 2 << 30,
		PeakReservedSumBytes: 3 << 30}}
	var out strings.Builder
	if err := WriteComparison(&out, before, after); err != nil {
		t.Fatal(err)
	}
	want := `pool: peak reserved, summed    1 GiB                  3 GiB
pool: largest pool's peak      1 GiB                  2 GiB
pool: reservations             1                      2
`
	if got := out.String(); !strings.Contains(got, "peak live                      0 B                    0 B\n"+want) {
		t.Errorf("comparison:\n%s\nwant it to hold:\n%s", got, want)
	}
}
