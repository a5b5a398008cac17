package requests

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/tracetest"
	"github.com/allocscope/allocscope/trace"
)

var extractFile = flag.String("extract.file", "", "BenchmarkCountFile reads the trace at `PATH` instead of a generated one")

// writeEvents writes events to a new trace file in tb's temp dir, batchRows rows per record batch.
func writeEvents(tb testing.TB, events []trace.Event, batchRows int) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "run.arrow")
	tracetest.Write(tb, path, trace.Info{Source: trace.SourceAllocscope}, events, trace.WithBatchRows(batchRows))
	return path
}

// BenchmarkCountFile measures Count over a trace file (-extract.file, or 1 Mi generated events):
// reading and extracting both layers' requests, as every pass of analyze does; one op is one event.
func BenchmarkCountFile(b *testing.B) {
	path := *extractFile
	if path == "" {
		path = writeEvents(b, mixedEvents(1<<20, 1), trace.DefaultBatchRows)
	}
	var events uint64
	b.ResetTimer()
	for events < uint64(b.N) {
		r, err := trace.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		st, err := Count(r)
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
		events += st.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
