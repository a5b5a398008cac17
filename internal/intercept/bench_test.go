package intercept

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allocscope/allocscope/trace"
)

// benchPairs is the number of cuMemAlloc_v2/cuMemFree_v2 pairs each bench thread does per run.
const benchPairs = 500000

// BenchmarkShimOverhead runs testdata/progs/bench.c (alloc/free pairs on the fake driver) without and
// with the shim and reports the median ns per call of both, the added ns per call and the events per
// second recorded by all threads together.
//
//	go test -run '^$' -bench ShimOverhead -benchtime 3x ./internal/intercept/
//
// (The fake driver's own cost is ns/call-base; ns/op is not meaningful and reported as 0.)
func BenchmarkShimOverhead(b *testing.B) {
	env(b)
	for _, threads := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			var base, shim, rate, cpuRate float64
			for i := 0; i < b.N; i++ {
				bn, _, _ := runBench(b, "", threads)
				dir := filepath.Join(b.TempDir(), fmt.Sprintf("logs%d", i))
				if err := PrepareLogDir(dir); err != nil {
					b.Fatal(err)
				}
				sn, sr, sc := runBench(b, dir, threads)
				checkRecorded(b, dir, int64(2*benchPairs*threads))
				base, shim, rate, cpuRate = base+bn, shim+sn, rate+sr, cpuRate+sc
			}
			n := float64(b.N)
			b.ReportMetric(base/n, "ns/call-base")
			b.ReportMetric(shim/n, "ns/call-shim")
			b.ReportMetric((shim-base)/n, "ns/call-added")
			b.ReportMetric(rate/n, "events/s")
			b.ReportMetric(cpuRate/n, "thread0-events/cpu-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// runBench runs the bench program and returns its median ns per call, calls per second (wall) and
// thread 0's calls per CPU second.
func runBench(b *testing.B, logDir string, threads int) (nsPerCall, perSecond, perCPUSecond float64) {
	res := runProgram(b, logDir, "bench", strconv.Itoa(threads), strconv.Itoa(benchPairs))
	f := strings.Fields(res.Stdout)
	if res.ExitCode != 0 || len(f) != 6 {
		b.Fatalf("bench: exit %d, output %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	var v [3]float64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseFloat(f[2*i+1], 64); err != nil {
			b.Fatalf("bench output %q", res.Stdout)
		}
	}
	return v[0], v[1], v[2]
}

// checkRecorded asserts that the shim recorded want events in dir and lost none.
func checkRecorded(b *testing.B, dir string, want int64) {
	logs, err := OpenLogs(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer logs.Close()
	if logs.total != want || logs.Lost() != 0 {
		b.Fatalf("shim recorded %d events and lost %d, want %d and 0", logs.total, logs.Lost(), want)
	}
}

// BenchmarkConvert converts a synthetic raw log of 1 Mi nearly sorted events (4 threads' worth of
// interleaving) into an Arrow trace written to io.Discard, and into a sink that drops events (the
// merge alone). Besides events/s it reports cpu-ns/event and cores (see reportConvertRates).
//
//	go test -run '^$' -bench Convert ./internal/intercept/
func BenchmarkConvert(b *testing.B) {
	const events = 1 << 20
	dir := b.TempDir()
	writeSyntheticLog(b, filepath.Join(dir, "1-1.alog"), 1, events, 4)
	b.Run("arrow", func(b *testing.B) {
		cpu0 := processCPU(b)
		for i := 0; i < b.N; i++ {
			w, err := trace.NewWriter(io.Discard, trace.Info{Source: "allocscope"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Convert(dir, w, ConvertOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
		reportConvertRates(b, events, processCPU(b)-cpu0)
	})
	b.Run("merge", func(b *testing.B) {
		cpu0 := processCPU(b)
		for i := 0; i < b.N; i++ {
			if _, err := convert(dir, discard{}, ConvertOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		reportConvertRates(b, events, processCPU(b)-cpu0)
	})
}

// reportConvertRates reports events/s (wall), the CPU time per event of the whole process and the
// cores it kept busy on average: on a shared machine events/s follows the load of others, cpu-ns/event
// does not.
func reportConvertRates(b *testing.B, events int, cpu time.Duration) {
	n := float64(events) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/event")
	b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
}

// processCPU returns the user and system CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type discard struct{}

func (discard) Write(*trace.Event) error { return nil }

// writeSyntheticLog writes a raw log of n alloc/free events whose seqs are shuffled within windows
// of `spread` records, as concurrent threads leave them.
func writeSyntheticLog(tb testing.TB, path string, pid uint32, n, spread int) {
	tb.Helper()
	recs := make([]rawRecord, n)
	for i := range recs {
		fn := uint8(1) // cudaMalloc
		if i%2 == 1 {
			fn = 2 // cudaFree
		}
		recs[i] = rawRecord{Seq: uint64(i), TimeNs: int64(1000 + i*50), DurationNs: 40,
			Address: 0x200000000000 + uint64(i/2)*512, Size: uint64(256 + i/2%64*256), TID: pid + uint32(i%spread),
			Device: 0, Function: fn, Callsite: 0x401000}
	}
	for i := 0; i+spread <= n; i += spread {
		for j := 0; j < spread/2; j++ {
			recs[i+j], recs[i+spread-1-j] = recs[i+spread-1-j], recs[i+j]
		}
	}
	if err := os.WriteFile(path, encodeRawLog(rawHeader{PID: pid, PPID: 1, StartMonoNs: 1,
		Command: []string{"synthetic"}}, recs), 0o644); err != nil {
		tb.Fatal(err)
	}
}
