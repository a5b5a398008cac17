package analysis

import (
	"bufio"
	"flag"
	"github.com/allocscope/allocscope/internal/analysis/internal/benchutil"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/trace"
)

var synthEvents = flag.Uint64("synth.events", 100_000_000, "events of BenchmarkAnalyzeSynthetic's trace")

// BenchmarkStatistics measures the statistics pass alone, in events per second: 256K events of a
// synthetic trace, generated beforehand (kept small so that the garbage collector's scans of them
// do not dominate), fed 16 times per iteration.
func BenchmarkStatistics(b *testing.B) {
	const n, repeat = 1 << 18, 16
	events := make([]trace.Event, 0, n)
	src := synth.New(n)
	for {
		batch, err := src.Next()
		if err != nil {
			break
		}
		events = append(events, batch...)
	}
	runtime.GC()
	cpu := benchutil.CPU()
	for b.Loop() {
		c := stats.NewCollector([]uint64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20})
		for range repeat {
			for i := 0; i < n; i += 8192 {
				c.Add(events[i:min(i+8192, n)])
			}
		}
		c.Finish(10)
	}
	benchutil.Report(b, n*repeat, benchutil.CPU()-cpu)
}

// BenchmarkAnalyzeSynthetic runs the whole analysis (statistics, sizing, all policies) over a
// synthetic trace generated on the fly (-synth.events, default 100M) and reports the peak RSS.
// Run it with -benchtime=1x.
func BenchmarkAnalyzeSynthetic(b *testing.B) {
	in := Input{Name: "synthetic", Open: func() (Source, error) { return synth.New(*synthEvents), nil }}
	cpu := benchutil.CPU()
	for b.Loop() {
		r, err := Analyze([]Input{in}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Combined.Events != *synthEvents {
			b.Fatalf("%d events analyzed, want %d", r.Combined.Events, *synthEvents)
		}
	}
	benchutil.Report(b, *synthEvents, benchutil.CPU()-cpu)
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")
}

// peakRSSMiB reads the process's peak resident set (VmHWM) from /proc/self/status.
func peakRSSMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
