package intercept

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/trace"
)

// Raw-log function ids of the test's calls (functionTable).
const (
	fnCudaMalloc = 1
	fnCudaFree   = 2
)

// peakCase is a raw log (one process, device 0) with extra events, and the peak live bytes that
// record's summary and analyze must both report for it.
type peakCase struct {
	name  string
	recs  []rawRecord
	extra []trace.Event
	want  uint64
}

// alloc and free are raw records of cudaMalloc and cudaFree; result 0 is success.
func alloc(addr, size uint64) rawRecord {
	return rawRecord{Function: fnCudaMalloc, Address: addr, Size: size}
}

func free(addr, size uint64, result uint16) rawRecord {
	return rawRecord{Function: fnCudaFree, Address: addr, Size: size, Result: result}
}

// peakCases: 0-byte allocations (one at the address of a live block, which must not free it),
// double frees (one the driver accepted, carrying the block's old size, one it refused), a free of an
// address never allocated carrying a size, and a trace whose framework events are its requests.
var peakCases = []peakCase{
	{name: "zero-byte allocations", want: 4000, recs: []rawRecord{
		alloc(0x1000, 1000), alloc(0x1000, 0), alloc(0x2000, 0), alloc(0x3000, 3000), // 4000 live: the peak
		free(0x3000, 3000, 0), free(0x1000, 1000, 0), alloc(0x4000, 1500), free(0x2000, 0, 0)}},
	{name: "double and unknown frees", want: 3500, recs: []rawRecord{
		alloc(0x1000, 1000), alloc(0x5000, 2000), free(0x1000, 1000, 0),
		free(0x1000, 1000, 0), free(0x1000, 1000, 1), free(0x9000, 4096, 0), // change nothing
		alloc(0x4000, 1500)}}, // 3500 live: the peak
	{name: "framework requests", want: 12, recs: []rawRecord{alloc(0x1000, 64), alloc(0x2000, 32)},
		extra: []trace.Event{
			{TimeNs: 1, PID: 1, Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncTorchAlloc, Size: 8, Address: 0x1000},
			{TimeNs: 1, PID: 1, Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncTorchAlloc, Size: 0, Address: 0x1000},
			{TimeNs: 1, PID: 1, Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncTorchAlloc, Size: 4, Address: 0x1100},
			{TimeNs: 2, PID: 1, Op: trace.OpFree, Layer: trace.LayerFramework, Function: trace.FuncTorchFree, Size: 8, Address: 0x7000},
			{TimeNs: 2, PID: 1, Op: trace.OpFree, Layer: trace.LayerFramework, Function: trace.FuncTorchFree, Size: 8, Address: 0x1000},
		}},
}

// Record's summary (Convert's Summary.PeakLiveBytes), analyze (the report's peak live) and the
// request stream that replay replays give the same, exact peak live bytes for every case.
func TestSummaryPeakLiveIsAnalyzes(t *testing.T) {
	for _, c := range peakCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range c.recs {
				c.recs[i].Seq = uint64(i)
			}
			writeLog(t, filepath.Join(dir, "1-1.alog"), rawHeader{PID: 1, Command: []string{"p"}}, c.recs)
			path := filepath.Join(t.TempDir(), "out.arrow")
			sum := convertToFile(t, dir, path, c.extra)
			in := analysis.Input{Name: "out", Open: func() (analysis.Source, error) { return trace.Open(path) }}
			r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Combined.Requests.PeakLiveBytes; sum.PeakLiveBytes != c.want || got != c.want {
				t.Errorf("peak live: record's summary %d, analyze %d; want %d", sum.PeakLiveBytes, got, c.want)
			}
			tr, err := requests.ExtractFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Stats.PeakLiveBytes != c.want {
				t.Errorf("request stream (replay's): peak live %d, want %d", tr.Stats.PeakLiveBytes, c.want)
			}
		})
	}
}

// convertToFile converts the raw logs of dir, with extra, into an Arrow trace at path.
func convertToFile(t *testing.T, dir, path string, extra []trace.Event) Summary {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewWriter(f, trace.Info{Source: "allocscope"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Convert(dir, w, ConvertOptions{Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return sum
}
