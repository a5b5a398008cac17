package analysis

import (
	"testing"

	"github.com/allocscope/allocscope/analysis/internal/sim"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// TestPagedArenaOnVariableShapeCNN: on the H200 trace of variable-shape CNN training without
// caching, one arena region needs 1.082 x peak live; the paged arena stays within 1.05 x with no
// fallbacks and becomes the recommendation, the one-region pool staying in the report.
func TestPagedArenaOnVariableShapeCNN(t *testing.T) {
	in := Input{Name: "cnn", Open: func() (Source, error) { return trace.Open("../testdata/h200/g_torch_nocache_cnn.arrow") }}
	r, err := Analyze([]Input{in}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := r.Combined
	rec, fixed := tr.Simulations[0], tr.Simulations[1]
	if rec.Name != "recommended" || rec.PeakReservedBytes != 1937292800 || rec.UpstreamReserves != 19 ||
		rec.UpstreamReleases != 17 || rec.Fallbacks != 0 || rec.Failures != 0 || rec.ReservedRatio > 1.05 {
		t.Errorf("recommended = %+v", rec)
	}
	if fixed.Name != "fixed-arena" || fixed.PeakReservedBytes != 1996013056 || fixed.UpstreamReserves != 1 {
		t.Errorf("fixed arena = %+v", fixed)
	}
	sc := tr.Config.SizeClass
	if sc.ArenaBytes != 7371489280 || sc.ArenaPaging == nil ||
		*sc.ArenaPaging != (pool.ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 1933574144}) {
		t.Errorf("config arena %d, paging %+v", sc.ArenaBytes, sc.ArenaPaging)
	}
	p := tr.SizeClasses
	if !p.ArenaPaged || p.ArenaBudgetBytes != 1933574144 || p.PoolBytes != 1937292800 || p.PeakLiveBytes != 1845064039 {
		t.Errorf("plan: paged %v budget %d pool %d peak live %d", p.ArenaPaged, p.ArenaBudgetBytes, p.PoolBytes, p.PeakLiveBytes)
	}
}

// TestChoosePagedKeepsFixed: a paged variant that needed a fallback, or passed its budget, is not
// chosen; it keeps its own row.
func TestChoosePagedKeepsFixed(t *testing.T) {
	paging := &pool.ArenaPaging{PageBytes: 2 << 20, BudgetBytes: 8 << 20}
	for _, st := range []pool.Stats{{Fallbacks: 1, PeakReservedBytes: 8 << 20}, {PeakReservedBytes: 10 << 20}} {
		rec := &recommendation{config: pool.Config{Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{ArenaBytes: 12 << 20}}}
		fixed := sim.Outcome{Policy: sim.Policy{Name: "recommended", Config: rec.config}}
		paged := sim.Outcome{Policy: sim.Policy{Name: pagedName, Config: pool.Config{Policy: pool.PolicySizeClass,
			SizeClass: &pool.SizeClassConfig{ArenaBytes: 64 << 20, ArenaPaging: paging}}}, Stats: st}
		outs := []sim.Outcome{fixed, paged}
		rec.choosePaged(outs, 1)
		if outs[0].Policy.Name != "recommended" || outs[1].Policy.Name != pagedName || rec.config.SizeClass.ArenaPaging != nil {
			t.Errorf("stats %+v: rows %q, %q; config paging %v", st, outs[0].Policy.Name, outs[1].Policy.Name, rec.config.SizeClass.ArenaPaging)
		}
	}
}
