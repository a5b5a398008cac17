package analysis

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// analyzeFile analyzes one of the repository's traces.
func analyzeFile(t *testing.T, path string) *schema.TraceReport {
	t.Helper()
	return analyzeFileWith(t, path, Options{})
}

// analyzeFileWith analyzes the trace file at path with opts and returns its report.
func analyzeFileWith(t *testing.T, path string, opts Options) *schema.TraceReport {
	t.Helper()
	in := Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }}
	r, err := Analyze([]Input{in}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r.Combined
}

// TestPagedArenaOnKVCache: on the H200 trace of generation with a growing KV cache (PyTorch
// without caching), one arena region needs 1.070 x peak live; the paged arena stays within 1.05 x
// with no fallbacks and 8 page operations for 47,208 requests. By default the one-region pool,
// which every consumer runs, stays the recommendation and the paged one is named beside it with
// its figures; with --arena paged it becomes the recommendation, the one-region pool staying in
// the report.
func TestPagedArenaOnKVCache(t *testing.T) {
	const path = "../../testdata/h200/h_torch_nocache_kvcache.arrow"
	def := analyzeFile(t, path)
	if rec, paged := def.Simulations[0], def.Simulations[1]; rec.Name != "recommended" || rec.PeakReservedBytes != 397603840 ||
		rec.PageOps != 0 || paged.Name != "paged-arena" || paged.PeakReservedBytes != 389215232 || paged.PageOps != 8 {
		t.Errorf("default: recommended %+v, paged %+v", rec, paged)
	}
	want := &schema.PagedAlternative{PeakReservedBytes: 389215232, PageOps: 8, SavedBytes: 397603840 - 389215232}
	if def.Config.SizeClass.ArenaPaging != nil || def.SizeClasses.ArenaPaged || !reflect.DeepEqual(def.SizeClasses.PagedAlternative, want) {
		t.Errorf("default: paging %+v, plan paged %v, alternative %+v; want none, %+v", def.Config.SizeClass.ArenaPaging,
			def.SizeClasses.ArenaPaged, def.SizeClasses.PagedAlternative, want)
	}
	var text bytes.Buffer
	if err := WriteText(&text, &Report{Combined: def}); err != nil {
		t.Fatal(err)
	}
	if line := "  a paged arena would reserve 371.2 MiB at peak (8 MiB less, 8 page operations):\n" +
		"    analyze --arena paged writes it; replay and the Go library run it, record --pool does not\n"; !strings.Contains(text.String(), line) {
		t.Errorf("the report lacks %q", line)
	}
	tr := analyzeFileWith(t, path, Options{Arena: ArenaPaged})
	rec, fixed := tr.Simulations[0], tr.Simulations[1]
	if rec.Name != "recommended" || rec.PeakReservedBytes != 389215232 || rec.PageOps != 8 || rec.UpstreamReserves != 7 ||
		rec.UpstreamReleases != 5 || rec.Fallbacks != 0 || rec.Failures != 0 || rec.ReservedRatio > 1.05 {
		t.Errorf("recommended = %+v", rec)
	}
	if fixed.Name != "fixed-arena" || fixed.PeakReservedBytes != 397603840 || fixed.UpstreamReserves != 1 || fixed.PageOps != 0 {
		t.Errorf("fixed arena = %+v", fixed)
	}
	sc := tr.Config.SizeClass
	if sc.ArenaBytes != 1486880768 || sc.ArenaPaging == nil ||
		*sc.ArenaPaging != (pool.ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 385875968}) {
		t.Errorf("config arena %d, paging %+v", sc.ArenaBytes, sc.ArenaPaging)
	}
	p := tr.SizeClasses
	if !p.ArenaPaged || p.ArenaBudgetBytes != 385875968 || p.PoolBytes != 389215232 || p.PeakLiveBytes != 371686976 {
		t.Errorf("plan: paged %v budget %d pool %d peak live %d", p.ArenaPaged, p.ArenaBudgetBytes, p.PoolBytes, p.PeakLiveBytes)
	}
}

// TestPagedArenaRejectedOnVariableShapeCNN: on the variable-shape CNN trace the paged arena
// would stay within 1.05 x peak live (one region: 1.082 x) but needs 457 page operations for
// 3,773 requests, more than one per sizeclass.MaxPageOpsShare: the one-region pool stays the
// recommendation and the paged one is reported beside it.
func TestPagedArenaRejectedOnVariableShapeCNN(t *testing.T) {
	tr := analyzeFile(t, "../../testdata/h200/g_torch_nocache_cnn.arrow")
	rec, paged := tr.Simulations[0], tr.Simulations[1]
	if rec.Name != "recommended" || rec.PeakReservedBytes != 1996013056 || rec.PageOps != 0 || tr.Config.SizeClass.ArenaPaging != nil {
		t.Errorf("recommended = %+v, paging %+v", rec, tr.Config.SizeClass.ArenaPaging)
	}
	if paged.Name != "paged-arena" || paged.PeakReservedBytes != 1937292800 || paged.PageOps != 457 || paged.Fallbacks != 0 ||
		paged.ReservedRatio > 1.05 || tr.SizeClasses.PagedAlternative != nil {
		t.Errorf("paged arena = %+v, named as the alternative: %+v", paged, tr.SizeClasses.PagedAlternative)
	}
}

// TestChoosePagedKeepsFixed: a paged variant that needed a fallback, or passed its budget, is not
// chosen; it keeps its own row.
func TestChoosePagedKeepsFixed(t *testing.T) {
	paging := &pool.ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 8 << 20}
	for _, st := range []pool.Stats{{Fallbacks: 1, PeakReservedBytes: 8 << 20}, {PeakReservedBytes: 10 << 20}} {
		rec := &recommendation{config: pool.Config{Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{ArenaBytes: 12 << 20}}}
		fixed := whatif.Outcome{Policy: whatif.Policy{Name: "recommended", Config: rec.config}}
		paged := whatif.Outcome{Policy: whatif.Policy{Name: pagedName, Config: pool.Config{Policy: pool.PolicySizeClass,
			SizeClass: &pool.SizeClassConfig{ArenaBytes: 64 << 20, ArenaPaging: paging}}}, Stats: st}
		outs := []whatif.Outcome{fixed, paged}
		rec.choosePaged(outs, 1, true)
		if outs[0].Policy.Name != "recommended" || outs[1].Policy.Name != pagedName || rec.config.SizeClass.ArenaPaging != nil {
			t.Errorf("stats %+v: rows %q, %q; config paging %v", st, outs[0].Policy.Name, outs[1].Policy.Name, rec.config.SizeClass.ArenaPaging)
		}
	}
}

// TestSnapshotCallsites: the leaks of the KV-cache snapshot name the code that allocated them, from
// the stacks PyTorch recorded (the workload's own Python frame), not a return address.
func TestSnapshotCallsites(t *testing.T) {
	tr := analyzeFile(t, "../../testdata/torch/kvcache.caching.snapshot.pickle.gz")
	leaks := tr.Anomalies.Leaks.Events
	if len(leaks) != 2 || leaks[0].Callsite != "kvcache (torch_work.py:74)" || leaks[1].Callsite != "kvcache (torch_work.py:74)" ||
		leaks[0].Size != 32<<20 || leaks[1].Size != 1<<20 {
		t.Errorf("leaks %+v", leaks)
	}
}

// TestSnapshotOOMExplained: the small snapshot's oom (1 TiB asked with 123,456 bytes free on
// device 0) is explained from its segments: 22 MiB reserved, 512 B allocated, the largest free
// block per stream, the one segment with blocks in use, and no setting that could have served 1 TiB.
func TestSnapshotOOMExplained(t *testing.T) {
	tr := analyzeFile(t, "../../testdata/trace/snapshot_small.pickle")
	want := &schema.OOMReport{Seq: 10, Device: 0, RequestedBytes: 1 << 40, DeviceFreeBytes: 123456,
		CapacityBytes: 23068672 + 123456, ReservedBytes: 23068672, AllocatedBytes: 512, CachedFreeBytes: 23068160,
		LargestFree: []schema.StreamFree{{Stream: 0, Bytes: 1024}, {Stream: 7, Bytes: 0}},
		Fragmented: []schema.FragmentedSegment{{Address: "0x7f0000000000", Stream: 0, SizeBytes: 20971520, FreeBytes: 1024,
			LargestFree: 1024, PinnedBy: []schema.PinningBlock{{SizeBytes: 512, Callsite: "(no stack recorded)"}}, PinnedBlocks: 1}}}
	if !reflect.DeepEqual(tr.OOM, want) {
		t.Errorf("oom = %+v\nwant %+v", tr.OOM, want)
	}
}
