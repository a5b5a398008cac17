package testcuda

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/allocscope/allocscope/trace"
)

// Render prints the fields of an event that the expected listings assert, on one line:
// function, op, memory, layer, size, address, result, device, and the stream and handle when set.
func Render(e *trace.Event) string {
	s := fmt.Sprintf("%s %s %s %s size=%d addr=%#x result=%d dev=%d", e.Function, e.Op, e.Memory, e.Layer,
		e.Size, e.Address, e.Result, e.Device)
	if e.Stream != 0 {
		s += fmt.Sprintf(" stream=%#x", e.Stream)
	}
	if e.Handle != 0 {
		s += fmt.Sprintf(" handle=%#x", e.Handle)
	}
	return s
}

// CheckEvents compares the rendered events with want, one Render line per event (blank lines and
// surrounding space ignored), and reports the first difference.
func CheckEvents(t testing.TB, events []trace.Event, want string) {
	t.Helper()
	var wantLines []string
	for _, l := range strings.Split(want, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			wantLines = append(wantLines, l)
		}
	}
	got := make([]string, len(events))
	for i := range events {
		got[i] = Render(&events[i])
	}
	if d := LineDiffs(got, wantLines); len(d) > 0 {
		t.Errorf("%d events, want %d; first difference at event %d:\n got  %s\n want %s",
			len(got), len(wantLines), d[0].Index, d[0].Got, d[0].Want)
	}
}

// LineDiff is one line where two listings differ: its index from 0, and each side's line, "(none)"
// where that side is shorter.
type LineDiff struct {
	Index     int
	Got, Want string
}

// LineDiffs returns every line where got and want differ, in order.
func LineDiffs(got, want []string) []LineDiff {
	var diffs []LineDiff
	for i := 0; i < max(len(got), len(want)); i++ {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			diffs = append(diffs, LineDiff{i, g, w})
		}
	}
	return diffs
}

// CheckSeqs asserts that the events carry exactly the seqs first, first+1, ... in order.
func CheckSeqs(t testing.TB, events []trace.Event, first uint64) {
	t.Helper()
	for i := range events {
		if events[i].Seq != first+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, events[i].Seq, first+uint64(i))
		}
	}
}

// ReadTrace reads every event and the metadata of the trace file at path, with a checked Arrow
// allocator that must hold nothing once the reader is closed.
func ReadTrace(t testing.TB, path string) ([]trace.Event, trace.Info) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	r, err := trace.Open(path, trace.WithReadAllocator(alloc))
	if err != nil {
		t.Fatalf("open trace: %v", err)
	}
	var events []trace.Event
	for {
		batch, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.Close()
			t.Fatalf("read trace: %v", err)
		}
		events = append(events, batch...)
	}
	info := r.Info()
	if err := r.Close(); err != nil {
		t.Fatalf("close trace: %v", err)
	}
	alloc.AssertSize(t, 0)
	return events, info
}
