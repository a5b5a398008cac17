package render

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/units"
	"github.com/allocscope/allocscope/pool"
)

// TextOptions are the choices of the terminal report.
type TextOptions struct {
	// Explain adds the rules the size classes, threshold and arena were chosen by.
	Explain bool
}

// Text writes the terminal report without the sizing rules (TextWith).
func Text(w io.Writer, r *schema.Report) error { return TextWith(w, r, TextOptions{}) }

// TextWith writes the terminal report: all inputs together, then each input alone; each trace's
// answer (schema.Answer) first, its details after it.
func TextWith(w io.Writer, r *schema.Report, opts TextOptions) error {
	tw := &textWriter{w: w, explain: opts.Explain}
	if len(r.PerFile) > 0 {
		tw.printf("inputs: %s\n\n", wrap(strings.Join(r.Inputs, ", "), 96, "  "))
	}
	tw.ranks(r.Ranks)
	tw.trace(r.Combined)
	for _, tr := range r.PerFile {
		tw.printf("\n%s\n", strings.Repeat("=", 100))
		tw.trace(tr)
	}
	if len(r.Warnings) > 0 {
		tw.printf("\nwarnings:\n")
		for _, s := range r.Warnings {
			tw.printf("  %s\n", wrap(s, 96, "    "))
		}
	}
	return tw.err
}

// callsites writes a table of callsites, the label cut to fit 100 columns.
func (t *textWriter) callsites(title string, rows []schema.CallsiteTally) {
	if len(rows) == 0 {
		return
	}
	t.printf("\n%s\n", title)
	lines := []string{"callsite\tallocs\tbytes\tat peak\tlive at end"}
	for _, r := range rows {
		label := r.Callsite
		if n := []rune(label); len(n) > 56 {
			label = string(n[:55]) + "…"
		}
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", label, Count(r.Allocs), Bytes(r.Bytes),
			Bytes(r.AtPeakBytes), Bytes(r.EndLiveBytes)))
	}
	t.table(lines)
}

// ranks writes the inputs side by side and the pool for every rank.
func (t *textWriter) ranks(rk *schema.Ranks) {
	if rk == nil {
		return
	}
	t.printf("RANKS (each input alone; own = its own recommended pool's peak reserved (rsv) and\n" +
		"fallbacks (fb), shared = those of the pool for every rank)\n")
	rows := []string{"input\tevents\tpeak live\town rsv\town fb\tshared rsv\tshared fb\tin calls"}
	for _, r := range rk.Rows {
		calls := "n/a" // no call durations in the input
		if r.MeasuredCallNs > 0 {
			calls = Duration(float64(r.MeasuredCallNs))
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", clipLeft(r.Name, 26), Count(r.Events),
			Bytes(r.PeakLiveBytes), Bytes(r.OwnReservedBytes), Count(r.OwnFallbacks), Bytes(r.SharedReserved),
			Count(r.SharedFallbacks+r.SharedFailures), calls))
	}
	t.table(rows)
	most := rk.MostCallTime
	if most == "" {
		most = "n/a (no call durations)"
	}
	line := fmt.Sprintf("highest peak: %s; most time inside allocation calls: %s", rk.HighestPeak, most)
	if rk.MostFallbacks != "" {
		line += "; most fallbacks of its own pool: " + rk.MostFallbacks
	}
	t.printf("  %s\n", wrap(line, 96, "    "))
	if rk.Config != nil {
		verdict := "every rank runs on it without growth or failure"
		if !rk.Fits {
			verdict = "some rank still grows or fails on it"
		}
		t.printf("  %s\n", wrap(fmt.Sprintf("the pool for every rank (--emit-config): %s, %s reserved; %s",
			settingsLine(rk.Config), Bytes(rk.Config.PlanBytes()), verdict), 96, "    "))
	}
	t.printf("\n")
}

// settingsLine sums up a size-class config: its classes and arena.
func settingsLine(c *pool.Config) string {
	sc := c.SizeClass
	if sc == nil {
		return string(c.Policy)
	}
	return fmt.Sprintf("%d classes up to %s, arena %s", len(sc.Classes), Bytes(sc.LargeThreshold), Bytes(sc.ArenaBytes))
}

type textWriter struct {
	w       io.Writer
	err     error
	explain bool // write the sizing rules
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// table writes rows (tab-separated cells) aligned in columns.
func (t *textWriter) table(rows []string) {
	if t.err != nil {
		return
	}
	tab := tabwriter.NewWriter(t.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range rows {
		if _, t.err = io.WriteString(tab, r+"\t\n"); t.err != nil {
			return
		}
	}
	t.err = tab.Flush()
}

func (t *textWriter) trace(tr *schema.TraceReport) {
	head := fmt.Sprintf("%s events, requests from the %s layer", Count(tr.Events), tr.RequestLayer)
	if line := "trace " + tr.Name + ": " + head; len([]rune(line)) <= 100 {
		t.printf("%s\n", line)
	} else {
		t.printf("trace %s\n  %s\n", clipLeft(tr.Name, 94), head)
	}
	if i := tr.Info; i != nil {
		t.printf("  source %s", i.Source)
		if len(i.Command) > 0 {
			t.printf(", command %s", clip(strings.Join(i.Command, " "), 60))
		}
		if i.Host != "" {
			t.printf(", host %s", i.Host)
		}
		if len(i.GPUs) > 0 {
			t.printf(", GPU %s", i.GPUs[0])
		}
		t.printf("\n")
	}
	t.answer(tr.Answer)
	t.framework(tr.Framework)
	t.summary("requests", tr.Requests)
	if tr.Upstream != nil {
		t.summary("upstream (native calls)", tr.Upstream)
	}
	t.ops(tr.Requests)
	t.groups(tr.Groups)
	t.histogram(tr.Requests)
	t.topSizes(tr.Requests)
	t.anomalies(&tr.Anomalies)
	t.callsites("CALLSITES (the code that allocated the most bytes)", tr.TopCallsites)
	t.callsites("CALLSITES (the code that held the most bytes at the peak of live bytes)", tr.PeakCallsites)
	if tr.CallsiteNote != "" {
		t.printf("\n  %s\n", wrap(tr.CallsiteNote, 96, "  "))
	}
	t.sizeClasses(tr.SizeClasses)
	t.simulations(tr.Simulations, tr.RequestLayer)
	t.fidelity(tr.Fidelity)
	if tr.Answer == nil || slices.Contains(tr.Answer.Equivalents, schema.EquivalentPyTorch) {
		t.torchSearch(tr.TorchSearch) // not for a program that does not run PyTorch
	}
	t.oom(tr.OOM)
	t.config(tr)
}

func (t *textWriter) summary(title string, s *schema.Stats) {
	t.printf("\n%s\n", strings.ToUpper(title))
	t.printf("  allocs %s (%s), frees %s (%s), live at end %s\n", Count(s.Allocs), Bytes(s.AllocBytes),
		Count(s.Frees), Bytes(s.FreedBytes), Bytes(s.EndLiveBytes))
	t.printf("  peak live %s in %s blocks at seq %d, %s after start\n", Bytes(s.PeakLiveBytes),
		Count(s.PeakLiveBlocks), s.PeakSeq, Duration(float64(s.PeakTimeNs-s.FirstTimeNs)))
	calls := "n/a (no call durations)"
	if s.CallNs > 0 {
		calls = fmt.Sprintf("%s (%s of wall)", Duration(float64(s.CallNs)), Percent(s.CallPercent))
	}
	t.printf("  wall %s, %s allocs/s (%s/s), in calls %s\n", Duration(float64(s.WallNs)),
		units.FormatRate(s.AllocsPerSec), Bytes(uint64(s.AllocBytesPerSec)), calls)
	if s.MedianFreeNs > 0 {
		t.printf("  median free %s; frees that waited for the device (>= %s): %s\n",
			Duration(float64(s.MedianFreeNs)), Duration(float64(s.WaitedFreeNs)), Count(s.WaitedFrees))
	}
	q := s.Lifetime
	if q.Count > 0 {
		exact := "exact"
		if !q.Exact {
			exact = "sampled"
		}
		t.printf("  lifetime (%s, %s): min %s  p50 %s  p90 %s  p99 %s  max %s\n", Count(q.Count), exact,
			Duration(q.Min), Duration(q.P50), Duration(q.P90), Duration(q.P99), Duration(q.Max))
	}
}

func (t *textWriter) ops(s *schema.Stats) {
	t.printf("\nOPERATIONS\n")
	rows := []string{"  op\tmemory\tcount\tfailed\tbytes"}
	for _, o := range s.Ops {
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%s\t%s", o.Op, o.Memory, Count(o.Count),
			Count(o.Failed), Bytes(o.Bytes)))
	}
	t.table(rows)
}

func (t *textWriter) groups(gs []*schema.Stats) {
	t.printf("\nPER PROCESS, DEVICE AND STREAM\n")
	rows := []string{"  pid\tdev\tstream\tallocs\tfrees\tpeak live\tend live\tp50 life\tcall%\twaited"}
	for _, g := range gs {
		share := "n/a"
		if g.CallNs > 0 {
			share = units.FormatRatio(g.CallPercent)
		}
		rows = append(rows, fmt.Sprintf("  %d\t%d\t%#x\t%s\t%s\t%s\t%s\t%s\t%s\t%s", g.PID, g.Device,
			g.Stream, Count(g.Allocs), Count(g.Frees), Bytes(g.PeakLiveBytes), Bytes(g.EndLiveBytes),
			Duration(g.Lifetime.P50), share, Count(g.WaitedFrees)))
	}
	t.table(rows)
}

func (t *textWriter) histogram(s *schema.Stats) {
	t.printf("\nSIZE HISTOGRAM (log2 buckets)\n")
	var most uint64
	for _, b := range s.Histogram {
		most = max(most, b.Count)
	}
	rows := []string{"  from\tto\tcount\tbytes\t"}
	for _, b := range s.Histogram {
		bar := strings.Repeat("#", int((b.Count*40+most-1)/max(most, 1)))
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%s\t%-40s", Bytes(b.Lo), Bytes(b.Hi), Count(b.Count),
			Bytes(b.Bytes), bar))
	}
	t.table(rows)
}

func (t *textWriter) topSizes(s *schema.Stats) {
	t.printf("\nMOST FREQUENT SIZES\n")
	rows := []string{"  size\tbytes\tcount"}
	for _, c := range s.TopSizes {
		rows = append(rows, fmt.Sprintf("  %s\t%d\t%s", Bytes(c.Size), c.Size, Count(c.Count)))
	}
	t.table(rows)
}

func (t *textWriter) anomalies(a *schema.Anomalies) {
	t.printf("\nANOMALIES\n")
	kinds := []struct {
		name string
		a    *schema.Anomaly
	}{{"leaks (never freed)", &a.Leaks}, {"double frees", &a.DoubleFrees},
		{"frees of unknown addresses", &a.UnknownFrees}, {"failed allocations", &a.FailedAllocs},
		{"zero-size requests", &a.ZeroSize}}
	for _, k := range kinds {
		t.printf("  %-28s %8s  %s\n", k.name, Count(k.a.Count), Bytes(k.a.Bytes))
		t.events(k.a.Events)
		if k.a == &a.Leaks && a.HeldByAllocator != nil {
			h := a.HeldByAllocator
			noun := "segments"
			if h.Count == 1 {
				noun = "segment"
			}
			t.printf("  held by %s's allocator until exit: %s %s, %s (not leaks)\n", h.Framework,
				Count(h.Count), noun, Bytes(h.Bytes))
			t.events(h.Events)
		}
	}
}

// events lists an anomaly's first events.
func (t *textWriter) events(refs []schema.EventRef) {
	for _, e := range refs {
		line := fmt.Sprintf("    seq %-9d %-22s %10s  addr %-14s", e.Seq, e.Function, Bytes(e.Size), e.Address)
		if from := "  from " + e.Callsite; len([]rune(line+from)) <= 100 {
			t.printf("%s%s\n", line, from)
		} else {
			t.printf("%s\n      %s\n", line, clip("from "+e.Callsite, 94))
		}
	}
}

// framework writes the note on a framework's allocator found among the driver calls.
func (t *textWriter) framework(n *schema.FrameworkNote) {
	if n == nil || n.Layer != "driver" {
		return
	}
	t.printf("\nFRAMEWORK: %s's own allocator; the trace has its segments, not the program's requests\n", n.Framework)
	for _, e := range n.Evidence {
		t.printf("  evidence: %s\n", wrap(e, 86, "    "))
	}
	if n.ArenaBytes > 0 {
		t.printf("  %s\n", wrap(arenaNote(n), 96, "  "))
	}
	t.printf("  to see its requests:\n    %s\n", wrap(n.SeeRequests, 96, "    "))
}

// arenaNote says what JAX's preallocated arena is.
func arenaNote(n *schema.FrameworkNote) string {
	share := ""
	if n.ArenaFraction > 0 {
		share = fmt.Sprintf(" (%.0f%% of the GPU's memory)", 100*n.ArenaFraction)
	}
	return fmt.Sprintf("JAX preallocated %s%s at start: its arena, not peak live; the program's peak is "+
		"inside it", Bytes(n.ArenaBytes), share)
}

func (t *textWriter) sizeClasses(p *schema.SizeClassPlan) {
	t.printf("\nSIZE CLASSES: k = %d of %d distinct aligned sizes <= %s\n", p.K, p.DistinctSizes,
		Bytes(p.LargeThreshold))
	if t.explain {
		t.printf("  k rule: %s\n", wrap(p.KRule, 88, "    "))
		t.printf("  threshold rule: %s\n", wrap(p.ThresholdRule, 80, "    "))
	}
	rows := []string{"  threshold\tk\tclass slots\tarena peak\ttotal"}
	for _, c := range p.Thresholds {
		rows = append(rows, fmt.Sprintf("  %s\t%d\t%s\t%s\t%s", Bytes(c.Threshold), c.K, Bytes(c.ClassBytes),
			Bytes(c.ArenaBytes), Bytes(c.TotalBytes)))
	}
	t.table(rows)
	rows = []string{"  class\tslots\trequests\tlive at peak\twaste at peak"}
	for _, c := range p.Classes {
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%s\t%s", Bytes(c.Size), Count(c.Slots),
			Count(c.Requests), Count(c.PeakLive), Bytes(c.WasteAtPk)))
	}
	t.table(rows)
	if t.explain {
		t.printf("  arena rule: %s\n", wrap(p.ArenaRule, 84, "    "))
	} else {
		t.printf("  (the rules that chose k, the threshold and the arena: analyze --explain)\n")
	}
	if a := p.PagedAlternative; a != nil {
		t.printf("  a paged arena would reserve %s at peak (%s less, %s page operations):\n"+
			"    analyze --arena paged writes it; replay and the Go library run it, record --pool does not\n", Bytes(a.PeakReservedBytes),
			Bytes(uint64(max(a.SavedBytes, 0))), Count(a.PageOps))
	}
	if p.ArenaPaged {
		t.printf("  pool <= %s = classes %s + paged arena of %s address space, at most %s mapped\n"+
			"    (large peak %s); peak live %s\n", Bytes(p.PoolBytes), Bytes(p.ClassBytes), Bytes(p.ArenaBytes),
			Bytes(p.ArenaBudgetBytes), Bytes(p.LargePeakLiveBytes), Bytes(p.PeakLiveBytes))
		return
	}
	t.printf("  pool %s = classes %s + arena %s (large peak %s); peak live %s\n",
		Bytes(p.PoolBytes), Bytes(p.ClassBytes), Bytes(p.ArenaBytes), Bytes(p.LargePeakLiveBytes),
		Bytes(p.PeakLiveBytes))
}

func (t *textWriter) fidelity(f *schema.Fidelity) {
	if f == nil {
		return
	}
	t.printf("\nFIDELITY (%s model vs the snapshot's segments)\n", f.Model)
	t.printf("  segments: real %s, model %s (%.1f%% match); bytes: real %s, model %s (%.1f%% match)\n",
		Count(f.RealSegments), Count(f.ModelSegments), f.CountMatch, Bytes(f.RealBytes),
		Bytes(f.ModelBytes), f.BytesMatch)
}

func (t *textWriter) torchSearch(ts *schema.TorchSearch) {
	if ts == nil || len(ts.Best) == 0 {
		return
	}
	within := "on unbounded memory"
	if ts.CapacityBytes > 0 {
		within = "within " + Bytes(ts.CapacityBytes)
	}
	t.printf("\nPYTORCH_CUDA_ALLOC_CONF (%d settings simulated; the best %d %s)\n", ts.Simulated, len(ts.Best), within)
	if !ts.Fits {
		t.printf("  no setting fits: the closest needs %s, %s more than %s\n",
			Bytes(ts.Best[0].PeakReservedBytes), Bytes(ts.MissBytes), Bytes(ts.CapacityBytes))
	}
	rows := ts.Best
	if !slices.ContainsFunc(rows, func(s schema.TorchSetting) bool { return s.Conf == "" }) {
		rows = append(rows[:len(rows):len(rows)], ts.Defaults)
	}
	for i, s := range rows {
		conf := ConfOrDefaults(s.Conf)
		label := fmt.Sprintf("%d.", i+1)
		if i == len(ts.Best) {
			label = "  "
		}
		t.printf("  %s %s\n", label, conf)
		retries := ""
		if s.Retries > 0 {
			retries = fmt.Sprintf(", %s retried", Count(s.Retries))
		}
		t.printf("     peak reserved %s (%s), %s cudaMalloc, %s cudaFree, %s failed%s\n", Bytes(s.PeakReservedBytes),
			vsDefaults(s.SavedBytes), Count(s.Segments), Count(s.Releases), Count(s.Failures), retries)
		t.processesReserved(s.Processes)
	}
	if a := ts.AsyncBackend; a != nil && a.Failures == 0 && a.PeakReservedBytes < ts.Best[0].PeakReservedBytes {
		t.printf("  not ranked: backend:cudaMallocAsync, peak reserved %s in the model (%s below the first);\n"+
			"     CUDA's pool is not predicted to the byte: real runs reserved up to a third more\n",
			Bytes(a.PeakReservedBytes), Bytes(ts.Best[0].PeakReservedBytes-a.PeakReservedBytes))
	}
	if strings.Contains(ts.Best[0].Conf, "garbage_collection_threshold") {
		// PyTorch collects only when the process has a memory fraction (allowed_memory_maximum).
		t.printf("  garbage_collection_threshold acts only with torch.cuda.set_per_process_memory_fraction(f),\n"+
			"  f = %d bytes / the device's total memory\n", ts.CapacityBytes)
	}
}

// processesReserved gives, for a setting of a trace of several processes, each process's own
// peak reserved (the peak above is their sum).
func (t *textWriter) processesReserved(procs []schema.ProcessReserved) {
	if len(procs) == 0 {
		return
	}
	parts := make([]string, len(procs))
	for i, p := range procs {
		parts[i] = fmt.Sprintf("pid %d %s", p.PID, Bytes(p.PeakReservedBytes))
	}
	t.printf("     the sum of each process's own allocator: %s\n", strings.Join(parts, ", "))
}

func (t *textWriter) oom(r *schema.OOMReport) {
	if r == nil {
		return
	}
	if m := r.Simulated; m != nil {
		t.printf("\nOUT OF MEMORY (seq %d, device %d, in the model within %s)\n", r.Seq, r.Device, Bytes(r.CapacityBytes))
		t.printf("  PYTORCH_CUDA_ALLOC_CONF=%s fails %s request(s); the first:\n", ConfOrDefaults(m.Conf),
			Count(m.Failures))
	} else if r.Recorded {
		t.printf("\nOUT OF MEMORY (seq %d, device %d, from the recorded history at the failing request)\n", r.Seq, r.Device)
	} else {
		t.printf("\nOUT OF MEMORY (seq %d, device %d, from the snapshot's segments)\n", r.Seq, r.Device)
	}
	t.printf("  asked for %s with %s free on the device; PyTorch could have held %s\n", Bytes(r.RequestedBytes),
		Bytes(r.DeviceFreeBytes), Bytes(r.CapacityBytes))
	t.printf("  reserved %s: %s allocated, %s cached but free\n", Bytes(r.ReservedBytes), Bytes(r.AllocatedBytes),
		Bytes(r.CachedFreeBytes))
	for _, f := range r.LargestFree {
		t.printf("  largest free block on stream %#x: %s\n", f.Stream, Bytes(f.Bytes))
	}
	for _, f := range r.Fragmented {
		t.printf("  segment %s (%s): %s free, largest %s, pinned by %d block(s) in use:\n", f.Address,
			Bytes(f.SizeBytes), Bytes(f.FreeBytes), Bytes(f.LargestFree), f.PinnedBlocks)
		for _, p := range f.PinnedBy {
			t.printf("    %10s  from %s\n", Bytes(p.SizeBytes), p.Callsite)
		}
	}
	if r.Fits != nil {
		t.printf("  would have fit: PYTORCH_CUDA_ALLOC_CONF=%s (peak reserved %s in the model)\n",
			ConfOrDefaults(r.Fits.Conf), Bytes(r.Fits.PeakReservedBytes))
	} else {
		t.printf("  no setting of the search fits in %s\n", Bytes(r.CapacityBytes))
	}
}

// ConfOrDefaults is a PYTORCH_CUDA_ALLOC_CONF value as the reports show it: "(defaults)" for "".
func ConfOrDefaults(conf string) string {
	if conf == "" {
		return "(defaults)"
	}
	return conf
}

// savedVsDefaults says what a setting saves against the defaults.
func savedVsDefaults(saved int64) string {
	if saved > 0 {
		return Bytes(uint64(saved)) + " saved"
	}
	return "nothing saved"
}

// vsDefaults says how a setting's peak reserved compares with the defaults'.
func vsDefaults(saved int64) string {
	switch {
	case saved > 0:
		return Bytes(uint64(saved)) + " less than the defaults"
	case saved < 0:
		return Bytes(uint64(-saved)) + " more than the defaults"
	}
	return "as the defaults"
}

func (t *textWriter) config(tr *schema.TraceReport) {
	c := tr.Config
	if c == nil || c.Prediction == nil || c.Equivalents == nil {
		return
	}
	p := c.Prediction
	t.printf("\nRECOMMENDATION (pool.json, policy %s)\n", c.Policy)
	if fw := tr.Framework; fw != nil && fw.Layer == "framework" {
		t.frameworkSetting(fw)
	}
	driverOnly := tr.Framework != nil && tr.Framework.Layer == "driver"
	if driverOnly {
		t.printf("  %s\n", wrap(segmentsNote(tr.Framework), 96, "  "))
	}
	if len(tr.Simulations) > 0 && (tr.Simulations[0].Failures > 0 || tr.Simulations[0].Error != "") {
		t.printf("  the pool does not fit the capacity: analyze --emit-config writes no pool.json\n")
	} else {
		saved := "n/a (no call durations)"
		if len(tr.Simulations) > 0 && tr.Simulations[0].MeasuredCallNs > 0 {
			saved = Duration(float64(p.AllocatorTimeSavedNs))
		}
		t.printf("  predicted: peak reserved %s for peak live %s, %s upstream calls,\n"+
			"             %s fallbacks, %s failures, allocator time saved %s\n", Bytes(p.PeakReservedBytes),
			Bytes(p.PeakLiveBytes), Count(p.UpstreamCalls), Count(p.Fallbacks), Count(p.Failures), saved)
	}
	if r := p.RecordPool; r != nil {
		t.printf("  record --pool: peak reserved %s, %s fallbacks, %s synchronizations of its own\n",
			Bytes(r.PeakReservedBytes), Count(r.Fallbacks), Count(r.Syncs))
	}
	if pp := tr.PerProcess; pp != nil && pp.Config != nil {
		t.printf("  %s\n", wrap(fmt.Sprintf("sized per process: the largest of %d processes: %s, %s reserved "+
			"(each process of record --pool makes its own pool; sized over all merged: %s)",
			pp.Processes, settingsLine(pp.Config), Bytes(pp.Config.PlanBytes()), Bytes(pp.MergedPlanBytes)), 96, "    "))
	}
	t.equivalents(tr)
}

// equivalents writes the other allocators' settings that apply to the program (schema.Answer's
// Equivalents; all of them for a report without an answer).
func (t *textWriter) equivalents(tr *schema.TraceReport) {
	e := tr.Config.Equivalents
	applies := func(name string) bool { return tr.Answer == nil || slices.Contains(tr.Answer.Equivalents, name) }
	if applies(schema.EquivalentPyTorch) {
		t.printf("  PYTORCH_CUDA_ALLOC_CONF=%s\n", torchConfLine(tr))
	}
	if applies(schema.EquivalentRMM) && e.RMMInitialPoolBytes > 0 {
		t.printf("  RMM pool_memory_resource: initial %d, maximum %d bytes\n", e.RMMInitialPoolBytes,
			e.RMMMaximumPoolBytes)
	}
	if applies(schema.EquivalentMemPool) && e.CudaMemPoolReleaseThreshold > 0 {
		t.printf("  cudaMemPoolAttrReleaseThreshold: %d bytes\n", e.CudaMemPoolReleaseThreshold)
	}
}

// torchConfLine is the PYTORCH_CUDA_ALLOC_CONF value the recommendation names, or why it names
// none.
func torchConfLine(tr *schema.TraceReport) string {
	fw := tr.Framework
	ts := tr.TorchSearch
	switch {
	case fw != nil && fw.Layer == "driver" && fw.Framework == "PyTorch":
		return "(needs PyTorch's requests)"
	case fw != nil && fw.Layer == "driver":
		return "(none from " + fw.Framework + "'s segments)"
	case ts != nil && !ts.Fits && len(ts.Best) > 0:
		return fmt.Sprintf("(no setting fits in %s: the closest needs %s)", Bytes(ts.CapacityBytes),
			Bytes(ts.Best[0].PeakReservedBytes))
	case tr.Config.Equivalents.PyTorchAllocConf == "":
		return "(defaults are best)"
	}
	return tr.Config.Equivalents.PyTorchAllocConf
}

// segmentsNote says that the pool below serves a framework's segments, not the program's requests.
func segmentsNote(n *schema.FrameworkNote) string {
	s := fmt.Sprintf("not a pool for the program's requests: this one is sized to %s's segments (what "+
		"record --pool would serve); the right pool and allocator settings need %s's requests (FRAMEWORK "+
		"above).", n.Framework, n.Framework)
	if n.ArenaBytes > 0 {
		s += fmt.Sprintf(" JAX's preallocation of %s is not peak live.", Bytes(n.ArenaBytes))
	}
	return s
}

// frameworkSetting leads the recommendation with the framework's own setting for its requests.
func (t *textWriter) frameworkSetting(n *schema.FrameworkNote) {
	setting := n.Setting
	if setting == "PYTORCH_CUDA_ALLOC_CONF=" {
		setting += " (unset: the defaults are best)"
	}
	t.printf("  first, %s's own setting: %s\n", n.Framework, setting)
	if n.DefaultsPeakReservedBytes > 0 {
		t.printf("    predicted peak reserved %s; the defaults' %s: %s\n", Bytes(n.PeakReservedBytes),
			Bytes(n.DefaultsPeakReservedBytes), savedVsDefaults(n.SavedBytes))
	} else {
		t.printf("    predicted peak reserved %s (a best-fit pool's, rounded up to 1 MiB)\n", Bytes(n.PeakReservedBytes))
	}
	t.printf("  then the pool of allocscope's own (pool.json):\n")
}

// wrap breaks s into lines of at most width columns, indenting the lines after the first; a
// number and its unit ("580 MiB", "4.69 s") stay on one line.
func wrap(s string, width int, indent string) string { return wrapFrom(s, width, indent, 0) }

// wrapFrom is wrap for a first line that starts at column col, as the lines after it do when col
// is len(indent).
func wrapFrom(s string, width int, indent string, col int) string {
	var b strings.Builder
	for i, word := range unitWords(strings.Fields(s)) {
		if i > 0 && col+1+len([]rune(word)) > width {
			b.WriteString("\n" + indent)
			col = len(indent)
		} else if i > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += len([]rune(word))
	}
	return b.String()
}

// unitNames are the words that follow a number in the reports: byte and time units.
var unitNames = map[string]bool{"B": true, "KiB": true, "MiB": true, "GiB": true, "TiB": true, "PiB": true,
	"EiB": true, "ns": true, "µs": true, "ms": true, "s": true}

// unitWords joins each unit word (unitNames, optionally followed by punctuation) to the word
// before it.
func unitWords(words []string) []string {
	out := words[:0:0]
	for _, w := range words {
		if len(out) > 0 && unitNames[strings.TrimRight(w, ",.;:)")] {
			out[len(out)-1] += " " + w
			continue
		}
		out = append(out, w)
	}
	return out
}

// clipLeft shortens s to at most n runes, keeping its end (a path's file name) and marking the
// cut with "...".
func clipLeft(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "..." + string(r[len(r)-n+3:])
}

// clip shortens s to at most n runes, marking the cut with "...".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
