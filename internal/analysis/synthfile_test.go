package analysis

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/internal/tracetest"
	"github.com/allocscope/allocscope/trace"
)

var synthWrite = flag.String("synth.write", "", "TestWriteSyntheticTrace writes the synthetic trace of -synth.events events to `PATH`")

// TestWriteSyntheticTrace writes the synthetic trace of BenchmarkAnalyzeSynthetic to an Arrow file,
// for timing analyze end to end on a file (issue 15):
//
//	go test ./internal/analysis -run WriteSyntheticTrace -synth.events 10000000 -synth.write /tmp/synth10m.arrow
//	analyze --quiet /tmp/synth10m.arrow
//
// Without -synth.write it is skipped.
func TestWriteSyntheticTrace(t *testing.T) {
	if *synthWrite == "" {
		t.Skip("no -synth.write")
	}
	w, err := trace.Create(*synthWrite, trace.Info{Source: trace.SourceAllocscope, Command: []string{"synthetic"}})
	if err != nil {
		t.Fatal(err)
	}
	src := synth.New(*synthEvents)
	for {
		batch, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		for i := range batch {
			if err := w.Write(&batch[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

var analyzeFilePath = flag.String("analyze.file", "", "BenchmarkAnalyzeFile analyzes the trace at `PATH`")

// BenchmarkAnalyzeFile runs the whole analysis over the trace file given by -analyze.file (skipped
// without it), as analyze --quiet does; with -cpuprofile it shows where analyze spends its time.
func BenchmarkAnalyzeFile(b *testing.B) {
	if *analyzeFilePath == "" {
		b.Skip("no -analyze.file")
	}
	in := Input{Name: *analyzeFilePath, Open: func() (Source, error) { return trace.Open(*analyzeFilePath) }}
	var events uint64
	for b.Loop() {
		r, err := Analyze([]Input{in}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		events += r.Combined.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// An Arrow trace file, read by column with its batches decoded ahead, analyzes to the report of
// the same events read from memory one by one: the synthetic trace in 15 batches, and the
// hand-made and framework traces of the golden reports.
func TestArrowFileAnalyzesAsEvents(t *testing.T) {
	var synthetic []trace.Event
	for src := synth.New(60_000); ; {
		batch, err := src.Next()
		if err != nil {
			break
		}
		synthetic = append(synthetic, batch...)
	}
	for name, events := range map[string][]trace.Event{"synthetic": synthetic, "handmade": handmade(), "framework": framework()} {
		path := filepath.Join(t.TempDir(), name+".arrow")
		var funcs []string
		for _, e := range events {
			funcs = append(funcs, e.Function)
		}
		tracetest.Write(t, path, trace.Info{Source: trace.SourceAllocscope}, events, trace.WithBatchRows(4096),
			trace.WithFunctions(funcs...))
		file := Input{Name: name, Open: func() (Source, error) { return trace.Open(path) }}
		memory := Input{Name: name, Open: func() (Source, error) { return &fakeSource{events: events, batch: 1000}, nil }}
		got, want := analyzeJSON(t, file), analyzeJSON(t, memory)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the report of the Arrow file differs from the report of its events (%d and %d bytes)", name, len(got), len(want))
		}
	}
}

// analyzeJSON returns the JSON report of in, without the trace file's metadata and the line on
// unnamed callsites (a file without modules has one, a source in memory that names nothing not).
func analyzeJSON(t *testing.T, in Input) []byte {
	t.Helper()
	r, err := Analyze([]Input{in}, Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	r.Combined.Info, r.Combined.CallsiteNote = nil, ""
	return output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) })
}
