package replay

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/allocscope/allocscope/replay"
)

// writeText prints the report for a person: what was replayed on what, a table of the modes, the
// speedups, the prediction next to the measurement, and every check.
func writeText(w io.Writer, tracePath, configPath string, rep *replay.Report) error {
	ew := &errWriter{w: w}
	ew.printf("allocscope replay of %s against %s (policy %s)\n", tracePath, configPath, rep.Policy)
	ew.printf("%s\n", rep.BackendDescription)
	t := rep.Trace
	ew.printf("trace: %d events; replayed %d allocations and %d frees of the %s layer on %d streams; peak live %s\n",
		t.Events, t.Allocs, t.Frees, t.Layer, t.Streams, byteCount(t.PeakLiveBytes))
	for _, line := range rep.Warnings {
		ew.printf("  warning: %s\n", line)
	}
	ew.printf("%d repetitions, modes interleaved (%s); verify %s, touch %s\n", rep.Repeat, modeList(rep), onOff(rep.Verify), onOff(rep.Touch))
	ew.printf("allocator time: timed passes, clock read once per 4096 requests, median over repetitions; latencies: checked passes, clock read around every call (each latency includes one reading, %d ns)\n\n",
		rep.ClockOverheadNs)
	writeModes(ew, rep)
	writeMemory(ew, rep)
	if rep.SpeedupRawOverPool > 0 || rep.SpeedupAsyncOverPool > 0 {
		ew.printf("\nspeedup of the pool (allocator time): %s x over raw, %s x over async\n",
			ratio(rep.SpeedupRawOverPool), ratio(rep.SpeedupAsyncOverPool))
	}
	if rep.RecordedNsPerRequest > 0 {
		ew.printf("the program's own calls took %s per request as recorded (device waits inside cudaFree included): %s x the pool's time\n",
			dur(rep.RecordedNsPerRequest), ratio(rep.SpeedupRecordedOverPool))
	}
	writePrediction(ew, rep)
	writeChecks(ew, rep)
	return ew.err
}

func writeModes(ew *errWriter, rep *replay.Report) {
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\talloc p50\talloc p99\talloc mean\tfree p50\tfree p99\tfree mean\tallocator time/rep\tper request\tallocs (all reps)\tfailures\tfallbacks\t")
	ops := rep.Trace.Allocs + rep.Trace.Frees
	for _, m := range rep.Modes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", m.Mode,
			dur(float64(m.Alloc.P50Ns)), dur(float64(m.Alloc.P99Ns)), dur(m.Alloc.MeanNs),
			dur(float64(m.Free.P50Ns)), dur(float64(m.Free.P99Ns)), dur(m.Free.MeanNs),
			dur(float64(m.AllocatorTimeNs)), dur(safeDiv(uint64(max(m.AllocatorTimeNs, 0)), ops)),
			m.Allocs, m.Failures+m.TimedFailures, m.Fallbacks)
	}
	_ = tw.Flush()
	writeSyncs(ew, rep)
	for _, m := range rep.Modes {
		for _, e := range m.Errors {
			ew.printf("  %s: %s\n", m.Mode, e)
		}
	}
}

// writeSyncs says, for each mode that followed the trace's sync points, how and at what cost.
func writeSyncs(ew *errWriter, rep *replay.Report) {
	for _, m := range rep.Modes {
		switch {
		case m.Syncs == 0:
		case m.Mode == replay.ModeAsync:
			ew.printf("%s: synchronized the device at the trace's %d sync points (checked passes), %s per repetition, not in the allocator time or the latencies\n",
				m.Mode, m.Syncs, dur(float64(m.SyncTimeNs)))
		default:
			ew.printf("%s: told the allocator of the trace's %d sync points (checked passes), in the allocator time\n", m.Mode, m.Syncs)
		}
	}
}

func writeMemory(ew *errWriter, rep *replay.Report) {
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tpeak live\tpeak reserved (own account)\tpeak reserved (MemGetInfo)\treserved/live\t")
	for _, m := range rep.Modes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", m.Mode, byteCount(m.PeakLiveBytes), byteCount(m.PeakReservedBytes),
			byteCount(m.PeakMemInfoBytes), ratio(safeDiv(m.PeakReservedBytes, m.PeakLiveBytes)))
	}
	_ = tw.Flush()
	mem := rep.Memory
	ew.printf("backend free memory: %s at the start, %s at the end, of %s\n",
		byteCount(mem.StartFreeBytes), byteCount(mem.EndFreeBytes), byteCount(mem.TotalBytes))
}

func writePrediction(ew *errWriter, rep *replay.Report) {
	p, m := rep.Prediction, rep.Mode(replay.ModePool)
	if p == nil || m == nil {
		return
	}
	ew.printf("\nprediction of analyze (pool.json) vs measured in pool mode:\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tpredicted\tmeasured\t")
	fmt.Fprintf(tw, "peak reserved\t%s\t%s\t\n", byteCount(p.PeakReservedBytes), byteCount(m.PeakReservedBytes))
	fmt.Fprintf(tw, "peak live\t%s\t%s\t\n", byteCount(p.PeakLiveBytes), byteCount(m.PeakLiveBytes))
	if s := m.PoolStats; s != nil {
		fmt.Fprintf(tw, "upstream calls\t%d\t%d\t\n", p.UpstreamCalls, s.UpstreamCalls())
	}
	fmt.Fprintf(tw, "fallbacks\t%d\t%d\t\n", p.Fallbacks, m.Fallbacks/uint64(rep.Repeat))
	fmt.Fprintf(tw, "failures\t%d\t%d\t\n", p.Failures, m.Failures/uint64(rep.Repeat))
	_ = tw.Flush()
}

func writeChecks(ew *errWriter, rep *replay.Report) {
	ew.printf("\nchecks:\n")
	for _, c := range rep.Checks {
		ew.printf("  %-4s  %s: %s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
	}
	if failed := len(rep.Failed()); failed > 0 {
		ew.printf("result: FAIL, %d of %d checks failed\n", failed, len(rep.Checks))
	} else {
		ew.printf("result: PASS, no check failed (%d checks)\n", len(rep.Checks))
	}
}

func modeList(rep *replay.Report) string {
	names := make([]string, len(rep.Modes))
	for i, m := range rep.Modes {
		names[i] = string(m.Mode)
	}
	return strings.Join(names, ", ")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func safeDiv(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// ratio prints a ratio with three significant digits, "-" for none.
func ratio(r float64) string {
	if r <= 0 {
		return "-"
	}
	if r >= 1000 {
		return fmt.Sprintf("%.0f", r) // %.3g would switch to exponent notation
	}
	return fmt.Sprintf("%.3g", r)
}

// dur prints nanoseconds with a unit, three significant digits.
func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g us", ns/1e3)
	default:
		return fmt.Sprintf("%.3g ns", ns)
	}
}

// byteCount prints a byte count in binary units with the exact count beside it.
func byteCount(n uint64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.3g %s (%d B)", v, units[u], n)
}

// errWriter keeps the first write error, so the printing code need not check each call.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
