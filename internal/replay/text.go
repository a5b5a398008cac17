package replay

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/allocscope/allocscope/internal/units"
	"github.com/allocscope/allocscope/pool"
)

// textWidth is the widest line of the text report.
const textWidth = 100

// WriteText writes rep for a person, in lines of at most 100 columns: what was replayed (tracePath)
// against what (configPath) on which backend, tables of the modes' latencies, allocator time and
// memory, the speedups, analyze's prediction next to the measurement, and every check.
func WriteText(w io.Writer, rep *Report, tracePath, configPath string) error {
	tw := &textWriter{w: w}
	tw.para("  ", "allocscope replay of %s against %s (policy %s)", tracePath, configPath, rep.Policy)
	tw.para("  ", "%s", rep.BackendDescription)
	t := rep.Trace
	tw.para("  ", "trace: %d events; replayed %d allocations and %d frees of the %s layer on %d streams; peak live %s",
		t.Events, t.Allocs, t.Frees, t.Layer, t.Streams, textBytes(t.PeakLiveBytes))
	for _, line := range rep.Warnings {
		tw.para("    ", "  warning: %s", line)
	}
	tw.para("  ", "%d repetitions, modes interleaved (%s); verify %s, touch %s", rep.Repeat, modeNames(rep),
		onOff(rep.Verify), onOff(rep.Touch))
	tw.para("  ", "allocator time: timed passes, clock read once per 4096 requests, median over repetitions; "+
		"latencies: checked passes, clock read around every call (each latency includes one reading, %d ns)",
		rep.ClockOverheadNs)
	tw.printf("\n")
	tw.modes(rep)
	tw.memory(rep)
	tw.speedups(rep)
	tw.prediction(rep)
	tw.checks(rep)
	return tw.err
}

// modes writes two tables, the latencies and the allocator time of each mode, and then how each
// mode followed the trace's sync points and its errors.
func (tw *textWriter) modes(rep *Report) {
	tab := tw.table()
	fmt.Fprintln(tab, "mode\talloc p50\talloc p99\talloc mean\tfree p50\tfree p99\tfree mean\t")
	for _, m := range rep.Modes {
		fmt.Fprintf(tab, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Mode,
			formatNs(float64(m.Alloc.P50Ns)), formatNs(float64(m.Alloc.P99Ns)), formatNs(m.Alloc.MeanNs),
			formatNs(float64(m.Free.P50Ns)), formatNs(float64(m.Free.P99Ns)), formatNs(m.Free.MeanNs))
	}
	_ = tab.Flush()
	tw.printf("\n")
	tab = tw.table()
	fmt.Fprintln(tab, "mode\tallocator time/rep\tper request\tallocs (all reps)\tfailures\tfallbacks\t")
	ops := rep.Trace.Allocs + rep.Trace.Frees
	for _, m := range rep.Modes {
		fmt.Fprintf(tab, "%s\t%s\t%s\t%d\t%d\t%d\t\n", m.Mode, formatNs(float64(m.AllocatorTimeNs)),
			formatNs(safeDiv(uint64(max(m.AllocatorTimeNs, 0)), ops)), m.Allocs, m.Failures+m.TimedFailures, m.Fallbacks)
	}
	_ = tab.Flush()
	tw.syncs(rep)
	for _, m := range rep.Modes {
		for _, e := range m.Errors {
			tw.para("    ", "  %s: %s", m.Mode, e)
		}
	}
}

// syncs says, for each mode that followed the trace's sync points, how and at what cost.
func (tw *textWriter) syncs(rep *Report) {
	for _, m := range rep.Modes {
		switch {
		case m.Syncs == 0:
		case m.Mode == ModeAsync:
			tw.para("  ", "%s: synchronized the device at the trace's %d sync points (checked passes), %s per "+
				"repetition, not in the allocator time or the latencies", m.Mode, m.Syncs, formatNs(float64(m.SyncTimeNs)))
		default:
			tw.para("  ", "%s: told the allocator of the trace's %d sync points (checked passes), in the allocator time",
				m.Mode, m.Syncs)
		}
	}
}

// memory writes the table of each mode's peak memory, its header on two lines to fit 100 columns
// with GiB figures, and the backend's free memory.
func (tw *textWriter) memory(rep *Report) {
	tw.printf("\n")
	tab := tw.table()
	fmt.Fprintln(tab, "\t\tpeak reserved\tpeak reserved\t\t")
	fmt.Fprintln(tab, "mode\tpeak live\t(own account)\t(MemGetInfo)\treserved/live\t")
	for _, m := range rep.Modes {
		fmt.Fprintf(tab, "%s\t%s\t%s\t%s\t%s\t\n", m.Mode, textBytes(m.PeakLiveBytes), textBytes(m.PeakReservedBytes),
			textBytes(m.PeakMemInfoBytes), formatRatio(safeDiv(m.PeakReservedBytes, m.PeakLiveBytes)))
	}
	_ = tab.Flush()
	mem := rep.Memory
	tw.para("  ", "backend free memory: %s at the start, %s at the end, of %s",
		textBytes(mem.StartFreeBytes), textBytes(mem.EndFreeBytes), textBytes(mem.TotalBytes))
}

// speedups writes the pool's speedups, the C pool's (cpool mode) and the program's own recorded
// time per request against them.
func (tw *textWriter) speedups(rep *Report) {
	goPool := rep.SpeedupRawOverPool > 0 || rep.SpeedupAsyncOverPool > 0
	cPool := rep.SpeedupRawOverCPool > 0 || rep.SpeedupAsyncOverCPool > 0 || rep.SpeedupPoolOverCPool > 0
	if goPool || cPool {
		tw.printf("\n")
	}
	if goPool {
		tw.para("  ", "speedup of the pool (allocator time): %s x over raw, %s x over async",
			formatRatio(rep.SpeedupRawOverPool), formatRatio(rep.SpeedupAsyncOverPool))
	}
	if cPool {
		tw.para("  ", "speedup of the C pool, cpool (allocator time): %s x over raw, %s x over async, %s x over pool",
			formatRatio(rep.SpeedupRawOverCPool), formatRatio(rep.SpeedupAsyncOverCPool), formatRatio(rep.SpeedupPoolOverCPool))
	}
	if rep.RecordedNsPerRequest <= 0 {
		return
	}
	cTime := ""
	if rep.SpeedupRecordedOverCPool > 0 {
		cTime = fmt.Sprintf(", %s x the C pool's", formatRatio(rep.SpeedupRecordedOverCPool))
	}
	tw.para("  ", "the program's own calls took %s per request as recorded (device waits inside cudaFree "+
		"included): %s x the pool's time%s", formatNs(rep.RecordedNsPerRequest), formatRatio(rep.SpeedupRecordedOverPool), cTime)
}

// prediction writes analyze's prediction (pool.json) next to what the pool and cpool modes measured.
func (tw *textWriter) prediction(rep *Report) {
	p := rep.Prediction
	var ms []*ModeResult
	for _, mode := range []Mode{ModePool, ModeCPool} {
		if m := rep.Mode(mode); m != nil {
			ms = append(ms, m)
		}
	}
	if p == nil || len(ms) == 0 {
		return
	}
	tab := tw.table()
	if len(ms) == 1 {
		tw.printf("\nprediction of analyze (pool.json) vs measured in %s mode:\n", ms[0].Mode)
		fmt.Fprintln(tab, "\tpredicted\tmeasured\t")
	} else {
		tw.printf("\nprediction of analyze (pool.json) vs measured in the pool and cpool modes:\n")
		fmt.Fprintln(tab, "\tpredicted\tpool\tcpool\t")
	}
	row := func(name string, predicted any, measured func(m *ModeResult) any) {
		fmt.Fprintf(tab, "%s\t%v\t", name, predicted)
		for _, m := range ms {
			fmt.Fprintf(tab, "%v\t", measured(m))
		}
		fmt.Fprintln(tab)
	}
	row("peak reserved", textBytes(p.PeakReservedBytes), func(m *ModeResult) any { return textBytes(m.PeakReservedBytes) })
	row("peak live", textBytes(p.PeakLiveBytes), func(m *ModeResult) any { return textBytes(m.PeakLiveBytes) })
	if ms[0].PoolStats != nil {
		row("upstream calls", p.UpstreamCalls, func(m *ModeResult) any { return upstreamCalls(m.PoolStats) })
	}
	row("fallbacks", p.Fallbacks, func(m *ModeResult) any { return m.Fallbacks / uint64(rep.Repeat) })
	row("failures", p.Failures, func(m *ModeResult) any { return m.Failures / uint64(rep.Repeat) })
	_ = tab.Flush()
}

// upstreamCalls returns s's upstream calls, "-" without counters.
func upstreamCalls(s *pool.Stats) any {
	if s == nil {
		return "-"
	}
	return s.UpstreamCalls()
}

// checks writes every check and the verdict.
func (tw *textWriter) checks(rep *Report) {
	tw.printf("\nchecks:\n")
	for _, c := range rep.Checks {
		tw.para("        ", "  %-4s  %s: %s", strings.ToUpper(c.Status), c.Name, c.Detail)
	}
	if failed := len(rep.Failed()); failed > 0 {
		tw.printf("result: FAIL, %d of %d checks failed\n", failed, len(rep.Checks))
	} else {
		tw.printf("result: PASS, no check failed (%d checks)\n", len(rep.Checks))
	}
}

// textWriter writes the text report and keeps the first write error, so the code that prints
// need not check each call.
type textWriter struct {
	w   io.Writer
	err error
}

func (tw *textWriter) Write(p []byte) (int, error) {
	if tw.err != nil {
		return 0, tw.err
	}
	n, err := tw.w.Write(p)
	tw.err = err
	return n, err
}

func (tw *textWriter) printf(format string, args ...any) { fmt.Fprintf(tw, format, args...) }

// nobreak is a value of the report, such as "5.9 KiB (6000 B)" or "35 us", that para keeps on
// one line.
type nobreak string

// para writes a paragraph, broken at spaces into lines of at most textWidth columns, never inside
// a nobreak argument; the lines after the first start with indent.
func (tw *textWriter) para(indent, format string, args ...any) {
	const glue = "\x00" // stands for the spaces of nobreak arguments while the lines are broken
	for i, a := range args {
		if v, ok := a.(nobreak); ok {
			args[i] = strings.ReplaceAll(string(v), " ", glue)
		}
	}
	words := strings.Split(fmt.Sprintf(format, args...), " ")
	for i, w := range words {
		words[i] = strings.ReplaceAll(w, glue, " ")
	}
	line, width := words[0], utf8.RuneCountInString(words[0])
	for _, word := range words[1:] {
		n := utf8.RuneCountInString(word)
		if width+1+n > textWidth && strings.TrimSpace(line) != "" {
			tw.printf("%s\n", line)
			line, width = indent+word, utf8.RuneCountInString(indent)+n
			continue
		}
		line, width = line+" "+word, width+1+n
	}
	tw.printf("%s\n", line)
}

// textTable is a right-aligned table of the text report: cells end with a tab, rows with a newline.
type textTable struct {
	*tabwriter.Writer
	buf bytes.Buffer
	out *textWriter
}

// table starts a table; Flush writes it.
func (tw *textWriter) table() *textTable {
	t := &textTable{out: tw}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	return t
}

// Flush writes the table, without the spaces that pad empty cells at the end of a row.
func (t *textTable) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	for _, row := range strings.SplitAfter(t.buf.String(), "\n") {
		if row != "" {
			t.out.printf("%s\n", strings.TrimRight(row, " \n"))
		}
	}
	t.buf.Reset()
	return t.out.err
}

func modeNames(rep *Report) string {
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

// formatRatio writes a ratio with three significant digits, "-" for none.
func formatRatio(r float64) nobreak {
	if r <= 0 {
		return "-"
	}
	return nobreak(units.FormatRatio(r))
}

// formatNs writes nanoseconds with three significant digits and a unit (units.FormatDuration):
// "78.6 ns", "1.01 µs".
func formatNs(ns float64) nobreak { return nobreak(units.FormatDuration(ns)) }

// textBytes writes a byte count as every report does (units.FormatBytes) and, from 1 KiB, the
// exact count beside it: "5.9 KiB (6000 B)", "512 B".
func textBytes(n uint64) nobreak {
	if n < 1024 {
		return nobreak(units.FormatBytes(n))
	}
	return nobreak(fmt.Sprintf("%s (%d B)", units.FormatBytes(n), n))
}
