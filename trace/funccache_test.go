package trace

import (
	"strings"
	"testing"
)

// TestWriterFunctionCache writes events whose functions cycle through every known name, two extra
// names and "", each a fresh copy (no shared string memory), in an order that makes names sharing a
// cache slot alternate; every event must read back with its own function.
func TestWriterFunctionCache(t *testing.T) {
	extra := []string{"my.alloc", "my.free"}
	names := append(append([]string{""}, knownFunctions...), extra...)
	var events []Event
	for round := 0; round < 3; round++ {
		for i := range names {
			for _, j := range []int{i, len(names) - 1 - i} {
				events = append(events, Event{Seq: uint64(len(events)), Function: strings.Clone(names[j])})
			}
		}
	}
	got, _, _ := readAll(t, writeTrace(t, testInfo(), events, WithFunctions(extra...), WithBatchRows(64)))
	if len(got) != len(events) {
		t.Fatalf("read back %d events, want %d", len(got), len(events))
	}
	for i := range events {
		if got[i].Function != events[i].Function {
			t.Fatalf("event %d: function %q, want %q", i, got[i].Function, events[i].Function)
		}
	}
}
