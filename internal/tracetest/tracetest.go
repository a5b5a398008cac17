// Package tracetest writes allocscope traces for the tests of packages that read them. (Package
// trace's own tests keep a writer of their own: they cannot import this package.)
package tracetest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/allocscope/allocscope/trace"
)

// Write writes events to a new trace file at path with info and opts, through a checked
// allocator, and fails tb on any error or leaked Arrow memory.
func Write(tb testing.TB, path string, info trace.Info, events []trace.Event, opts ...trace.WriterOption) {
	tb.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	w, err := trace.Create(path, info, append([]trace.WriterOption{trace.WithAllocator(alloc)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range events {
		if err := w.Write(&events[i]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	alloc.AssertSize(tb, 0)
}
