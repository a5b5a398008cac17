package analysis

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; run go test ./internal/analysis -update and review the diff\n%s",
			name, got)
	}
}

// framework is a PyTorch-like trace: framework requests served from native segments.
func framework() []trace.Event {
	b := &builder{}
	fw := func(op trace.Op, addr, size uint64) {
		fn := map[trace.Op]string{trace.OpAlloc: "torch.alloc", trace.OpFree: "torch.free_completed"}[op]
		b.add(trace.Event{Op: op, Layer: trace.LayerFramework, Function: fn, Address: addr, Size: size, Stream: 7})
	}
	b.add(trace.Event{Op: trace.OpAlloc, Function: "torch.segment_alloc", Address: 0x10000000, Size: 2 << 20})
	for step := range 3 {
		fw(trace.OpAlloc, 0x10000000, 4096)
		fw(trace.OpAlloc, 0x10001000, 512*1024)
		if step == 0 {
			b.add(trace.Event{Op: trace.OpAlloc, Function: "torch.segment_alloc", Address: 0x20000000, Size: 14 << 20})
		}
		fw(trace.OpAlloc, 0x20000000, 12<<20+100)
		fw(trace.OpFree, 0x10001000, 0)
		fw(trace.OpFree, 0x20000000, 0)
		fw(trace.OpFree, 0x10000000, 0)
	}
	return b.events
}

func output(t *testing.T, r *Report, write func(*bytes.Buffer, *Report) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGoldenReports(t *testing.T) {
	text := func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }
	js := func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) }
	second := handmade()
	for i := range second {
		second[i].PID = 200
		second[i].TimeNs += 500
	}
	for _, c := range []struct {
		name   string
		inputs []Input
	}{
		{"handmade", []Input{fakeInput("handmade", handmade())}},
		{"framework", []Input{fakeInput("framework", framework())}},
		{"two-files", []Input{fakeInput("rank0", handmade()), fakeInput("rank1", second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Analyze(c.inputs, Options{Top: 5})
			if err != nil {
				t.Fatal(err)
			}
			out := output(t, r, text)
			for i, line := range strings.Split(string(out), "\n") {
				if n := len([]rune(line)); n > 100 {
					t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
				}
			}
			golden(t, c.name+".txt", out)
			golden(t, c.name+".json", output(t, r, js))
		})
	}
}

func TestFrameworkFidelityAndConfig(t *testing.T) {
	r, err := Analyze([]Input{fakeInput("framework", framework())}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := r.Combined
	if tr.RequestLayer != "framework" || tr.Upstream == nil || tr.Upstream.Allocs != 2 {
		t.Fatalf("layer %s upstream %+v", tr.RequestLayer, tr.Upstream)
	}
	f := tr.Fidelity
	// PyTorch's model makes the same 2 MiB small segment and 14 MiB large segment (requests of
	// 10 MiB or more are rounded up to 2 MiB and get a segment of their own).
	if f == nil || f.Model != "pytorch" || f.RealSegments != 2 || f.RealBytes != 16<<20 ||
		f.ModelSegments != 2 || f.ModelBytes != 16<<20 || f.CountMatch != 100 || f.BytesMatch != 100 {
		t.Fatalf("fidelity = %+v", f)
	}
	if tr.Requests.PeakLiveBytes != 4096+512*1024+12<<20+100 || tr.Requests.Allocs != 9 {
		t.Errorf("requests: peak %d allocs %d", tr.Requests.PeakLiveBytes, tr.Requests.Allocs)
	}
	cfg := Config(r)
	if cfg.Prediction == nil || cfg.Prediction.Fallbacks != 0 || cfg.Prediction.Failures != 0 ||
		cfg.Prediction.PeakLiveBytes != tr.Requests.PeakLiveBytes {
		t.Errorf("prediction = %+v", cfg.Prediction)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("emitted config does not validate: %v", err)
	}
}

// outsideRef matches what would make a page load something from elsewhere.
var outsideRef = regexp.MustCompile(`(?i)https?:|src=|href=|@import|url\(|<link|fetch\(|XMLHttpRequest|import\(`)

// uplotBanner is the vendored uPlot's first line, a comment that names its home.
const uplotBanner = "/*! https://github.com/leeoniya/uPlot (v1.6.32) */"

// TestHTMLSelfContained checks that the page loads nothing from elsewhere (but for the comment
// that credits uPlot, it names no address at all) and has its sections; without
// Options.Detail the timeline is the report's downsampled one, without events. The browser tests of
// internal/analysis/internal/render load it in Chromium.
func TestHTMLSelfContained(t *testing.T) {
	for _, detail := range []bool{false, true} {
		r, err := Analyze([]Input{fakeInput("handmade", handmade())}, Options{Detail: detail})
		if err != nil {
			t.Fatal(err)
		}
		page := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) }))
		if n := strings.Count(page, uplotBanner); n != 1 {
			t.Errorf("uPlot's banner %d times, want once", n)
		}
		if m := outsideRef.FindString(strings.Replace(page, uplotBanner, "", 1)); m != "" {
			t.Errorf("page refers outside itself: %q", m)
		}
		for _, want := range []string{`<section class="stream" id="stream-0">`, "Live bytes over time",
			"Memory at each policy's peak of reserved bytes", "Memory map at the peak", `<div class="pmap" data-map="1">`,
			"What-if simulation", "Request sizes (log2 buckets, a bar for each)", "<h3>The answer</h3>", "<h3>Anomalies and leaks</h3>",
			"Allocation lifetimes", "peak live 3 MiB", "<summary>Text report</summary>",
			fmt.Sprintf(`"events":%v`, detail), "Permission is hereby granted, free of charge"} {
			if !strings.Contains(page, want) {
				t.Errorf("page (detail %v) lacks %q", detail, want)
			}
		}
	}
}

// TestTextWidthWithLargeValues checks the 100-column limit with realistic large figures: a 7-digit
// pid, a pointer-sized stream handle, millions of events, long durations.
func TestTextWidthWithLargeValues(t *testing.T) {
	var events []trace.Event
	for i := range 3000 {
		e := trace.Event{Seq: uint64(i + 1), TimeNs: int64(i) * 3_000_000_000, DurationNs: 12_345_678,
			PID: 4_194_303, Device: 7, Stream: 0x55d4c0a1b2c0, Op: trace.OpAlloc, Address: uint64(i+1) << 30,
			Size: 123_456_789_012, Function: "cudaMallocAsync", Callsite: 0x7f12_3456_789a}
		events = append(events, e)
	}
	r, err := Analyze([]Input{fakeInput("a-rather-long-trace-name-for-the-width-test.arrow", events)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) })), "\n") {
		if n := len([]rune(line)); n > 100 && !strings.HasPrefix(line, "trace ") {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
	}
}

// An analysis whose request logs spill whole to disk (a memory budget of 1 byte) reports exactly
// what one holding them in memory reports, for a native trace, a PyTorch snapshot and two inputs
// (whose logs the ranks' comparison reads again), and leaves no file behind.
func TestSpilledAnalysisSameReport(t *testing.T) {
	file := func(path string) Input {
		path = filepath.Join("..", "..", "testdata", path)
		return Input{Name: filepath.Base(path), Open: func() (Source, error) { return trace.Open(path) }}
	}
	for _, inputs := range [][]Input{{file("../internal/cli/analyze/bundled/pytorch-train.arrow")}, {file("torch/kvcache.caching.snapshot.pickle.gz")},
		{file("../internal/cli/analyze/bundled/pytorch-train.arrow"), file("trace/small.arrow")}} {
		var reports [2][]byte
		dir := t.TempDir()
		for i, memory := range []uint64{0, 1} {
			r, err := Analyze(inputs, Options{MemoryBytes: memory, SpillDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			reports[i] = output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) })
		}
		if !bytes.Equal(reports[0], reports[1]) || len(reports[0]) < 10_000 {
			t.Errorf("%s: %d bytes of report in memory, %d spilled: they differ", inputs[0].Name, len(reports[0]), len(reports[1]))
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s: left %d files in the spill directory", inputs[0].Name, len(left))
		}
	}
}

// Every stage reports its progress in order, never going back, and ends at its total: the events
// of the trace in the statistics pass (which knows no total yet), then the requests of its log.
func TestProgressEndsAtEveryStagesTotal(t *testing.T) {
	path := filepath.Join("..", "..", "internal", "cli", "analyze", "bundled", "pytorch-train.arrow")
	type seen struct{ calls, done, total uint64 }
	stages := map[string]*seen{}
	var order []string
	progress := func(stage string, done, total uint64) {
		s := stages[stage]
		if s == nil {
			s = &seen{}
			stages[stage], order = s, append(order, stage)
		}
		if done < s.done || (s.calls > 0 && total != s.total) {
			t.Errorf("%s: %d of %d after %d of %d", stage, done, total, s.done, s.total)
		}
		s.calls, s.done, s.total = s.calls+1, done, total
	}
	in := Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }}
	r, err := Analyze([]Input{in}, Options{Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, stage := range order {
		s := stages[stage]
		got = append(got, fmt.Sprintf("%s %d/%d", stage, s.done, s.total))
	}
	want := []string{"statistics pytorch-train.arrow 1787/0", "sizing pytorch-train.arrow 1785/1785",
		"arena pytorch-train.arrow 1785/1785", "simulation pytorch-train.arrow 1785/1785"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") || r.Combined.Events != 1787 {
		t.Errorf("stages %q (%d events), want %q", got, r.Combined.Events, want)
	}
}

// infoSource is a fakeSource with a trace's metadata, as *trace.Reader has.
type infoSource struct {
	fakeSource
	info trace.Info
}

func (s *infoSource) Info() trace.Info { return s.info }

// A trace whose recorder lost events (trace.Info.LostEvents) gets a warning in the text, JSON and
// HTML reports, the same words in all three.
func TestGoldenLostEvents(t *testing.T) {
	in := Input{Name: "lost", Open: func() (Source, error) {
		return &infoSource{fakeSource: fakeSource{events: handmade(), batch: 3}, info: trace.Info{LostEvents: 12345}}, nil
	}}
	r, err := Analyze([]Input{in}, Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "lost-events.txt", output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	golden(t, "lost-events.json", output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) }))
	page := output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) })
	warnings := regexp.MustCompile(`<ul class="warnings">.*?</ul>`).Find(page)
	golden(t, "lost-events.warnings.html", append(warnings, '\n'))
	const want = "lost: 12,345 events were not recorded (full disk or unwritable log): leaks, peaks and the pool " +
		"below are from an incomplete trace"
	if !slices.Equal(r.Warnings, []string{want}) {
		t.Errorf("warnings %q, want %q", r.Warnings, want)
	}
}
