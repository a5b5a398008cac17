package analysis

import (
	"fmt"

	fwdetect "github.com/allocscope/allocscope/internal/analysis/internal/framework"
	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/units"
)

// Answer is what a report says first (schema.Answer).
type Answer = schema.Answer

// answer computes what tr's report says first from the rest of it: today's allocator, the
// recommendation in the user's terms, what it saves, the anomalies that need action. capacity is
// the device memory the analysis ran within (0: unbounded).
func answer(tr *schema.TraceReport, st *stats.Result, info *schema.TraceInfo, capacity uint64) *schema.Answer {
	a := &schema.Answer{PeakLiveBytes: tr.Requests.PeakLiveBytes, WallNs: tr.Requests.WallNs, Actions: actions(tr)}
	if len(tr.Simulations) > 0 && tr.Simulations[0].MeasuredCallNs > 0 {
		a.CallTimeKnown, a.CallNs = true, tr.Simulations[0].MeasuredCallNs
		if a.WallNs > 0 {
			a.CallPercent = 100 * float64(a.CallNs) / float64(a.WallNs)
		}
	}
	a.Today = today(tr, requestFramework(st))
	a.Equivalents = equivalentsThatApply(tr, a.Today, info)
	a.Recommendation = advice(tr, a.Today, capacity)
	a.Savings = savings(tr, a)
	return a
}

// today is the allocator the program uses now: on a trace of a framework's requests, that
// framework's (its reserved bytes those of the trace's segments, or for PyTorch its model with
// the snapshot's settings); requested names that framework (requestFramework, "" for RMM); on a trace of driver calls, the framework allocator found there, else
// raw cudaMalloc, holding what the traced calls held.
func today(tr *schema.TraceReport, requested fwdetect.Name) schema.Today {
	fw := tr.Framework
	if tr.RequestLayer == string(requests.Framework) {
		t := schema.Today{Allocator: schema.AllocatorRMM}
		switch {
		case fw != nil && fw.Framework == string(fwdetect.PyTorch), requested == fwdetect.PyTorch:
			return torchToday(tr)
		case requested == fwdetect.CuPy:
			t.Allocator = schema.AllocatorCuPy
		case requested == fwdetect.JAX:
			t.Allocator = schema.AllocatorJAX
		}
		if tr.Upstream != nil && tr.Upstream.Allocs > 0 {
			t.PeakReservedBytes, t.ReservedFrom = tr.Upstream.PeakLiveBytes, schema.ReservedFromTrace
		}
		return t
	}
	t := schema.Today{Allocator: schema.AllocatorRaw, PeakReservedBytes: tr.Requests.PeakLiveBytes,
		ReservedFrom: schema.ReservedFromTrace}
	if fw != nil {
		t.Allocator = map[string]string{string(fwdetect.PyTorch): schema.AllocatorPyTorch,
			string(fwdetect.CuPy): schema.AllocatorCuPy, string(fwdetect.JAX): schema.AllocatorJAX}[fw.Framework]
		if fw.ArenaBytes > 0 {
			t.PeakReservedBytes = max(t.PeakReservedBytes, fw.ArenaBytes)
		}
	}
	return t
}

// torchToday is PyTorch's caching allocator as the program runs it: with expandable segments
// when the snapshot maps memory (the fidelity's model), else with its defaults; its peak
// reserved from the model of that setting.
func torchToday(tr *schema.TraceReport) schema.Today {
	t := schema.Today{Allocator: schema.AllocatorPyTorch}
	name := "pytorch"
	if tr.Fidelity != nil && tr.Fidelity.Model == "pytorch-expandable" {
		name, t.Settings = "pytorch-expandable", "expandable_segments:True"
	}
	if ts := tr.TorchSearch; name == "pytorch" && ts != nil && ts.Defaults.Error == "" && ts.Defaults.Failures == 0 &&
		ts.Defaults.PeakReservedBytes > 0 {
		// the search's, on unbounded memory: the defaults' simulation may fail within a capacity
		t.PeakReservedBytes, t.ReservedFrom = ts.Defaults.PeakReservedBytes, schema.ReservedFromModel
		return t
	}
	for _, s := range tr.Simulations {
		if s.Name == name && s.Error == "" && s.Failures == 0 {
			t.PeakReservedBytes, t.ReservedFrom = s.PeakReservedBytes, schema.ReservedFromModel
		}
	}
	return t
}

// advice is the recommendation in the user's terms: a framework's own setting for a trace of its
// requests, the request recording a trace of a framework's segments needs, else allocscope's
// pool; or, within a capacity nothing fits, that plainly.
func advice(tr *schema.TraceReport, now schema.Today, capacity uint64) schema.Advice {
	if fw := tr.Framework; fw != nil && fw.Layer == "driver" {
		return schema.Advice{Kind: schema.AdviceRecordRequests, Setting: fw.SeeRequests,
			Summary: fmt.Sprintf("the trace holds %s's segments, not its requests: record them first", fw.Framework)}
	}
	if now.Allocator == schema.AllocatorPyTorch {
		return torchAdvice(tr.TorchSearch, now)
	}
	if fw := tr.Framework; fw != nil && fw.Setting != "" {
		return schema.Advice{Kind: schema.AdviceSetting, Setting: fw.Setting, PeakReservedBytes: fw.PeakReservedBytes,
			Summary: fmt.Sprintf("set %s: peak reserved %s", fw.Setting, units.FormatBytes(fw.PeakReservedBytes))}
	}
	if tr.RequestLayer == string(requests.Framework) && tr.Config != nil && tr.Config.Equivalents != nil &&
		tr.Config.Equivalents.RMMInitialPoolBytes > 0 {
		e := tr.Config.Equivalents
		set := fmt.Sprintf("rmm::mr::pool_memory_resource(initial %d, maximum %d bytes)", e.RMMInitialPoolBytes,
			e.RMMMaximumPoolBytes)
		return schema.Advice{Kind: schema.AdviceSetting, Setting: set, PeakReservedBytes: bestFitPeak(tr.Simulations),
			Summary: "use " + set}
	}
	return poolAdvice(tr, capacity)
}

// torchAdvice is the best PYTORCH_CUDA_ALLOC_CONF of the search against the setting the program
// runs with (now).
func torchAdvice(ts *schema.TorchSearch, now schema.Today) schema.Advice {
	if ts == nil || len(ts.Best) == 0 {
		return schema.Advice{Kind: schema.AdviceNoneFits, Summary: "no PYTORCH_CUDA_ALLOC_CONF setting could be simulated"}
	}
	best := ts.Best[0]
	a := schema.Advice{Setting: "PYTORCH_CUDA_ALLOC_CONF=" + best.Conf, PeakReservedBytes: best.PeakReservedBytes,
		CapacityBytes: ts.CapacityBytes}
	switch {
	case !ts.Fits:
		a.Kind, a.MissBytes = schema.AdviceNoneFits, ts.MissBytes
		a.Summary = noneFits(ts.CapacityBytes, "PYTORCH_CUDA_ALLOC_CONF setting, "+render.ConfOrDefaults(best.Conf),
			best.PeakReservedBytes, ts.MissBytes, best.Failures)
	case best.Conf == now.Settings && best.Conf == "":
		a.Kind = schema.AdviceKeep
		a.Summary = fmt.Sprintf("keep PyTorch's defaults (PYTORCH_CUDA_ALLOC_CONF unset): none of %d settings "+
			"reserves less than their %s", ts.Simulated, units.FormatBytes(best.PeakReservedBytes))
	case best.Conf == now.Settings:
		a.Kind = schema.AdviceKeep
		a.Summary = fmt.Sprintf("keep %s: none of %d settings reserves less than its %s", a.Setting,
			ts.Simulated, units.FormatBytes(best.PeakReservedBytes))
	default:
		a.Kind = schema.AdviceSetting
		a.Summary = fmt.Sprintf("set %s: peak reserved %s", a.Setting, units.FormatBytes(best.PeakReservedBytes))
	}
	return a
}

// noneFits says that nothing fits the capacity: the closest candidate, its peak reserved, by how
// much it passes the capacity or how many requests it fails there.
func noneFits(capacity uint64, closest string, reserved, miss, failures uint64) string {
	s := fmt.Sprintf("nothing fits in %s: the closest %s, needs %s", units.FormatBytes(capacity), closest,
		units.FormatBytes(reserved))
	if miss > 0 {
		return s + fmt.Sprintf(" (%s more)", units.FormatBytes(miss))
	}
	return s + fmt.Sprintf(" and fails %s requests there", units.FormatCount(int64(failures)))
}

// poolAdvice is allocscope's pool (pool.json), the first simulation; within a capacity it does not
// fit, that.
func poolAdvice(tr *schema.TraceReport, capacity uint64) schema.Advice {
	if len(tr.Simulations) == 0 || tr.Config == nil {
		return schema.Advice{Kind: schema.AdviceNoneFits, Summary: "no pool could be sized"}
	}
	s := tr.Simulations[0]
	a := schema.Advice{Setting: "pool.json (analyze --emit-config), policy " + string(tr.Config.Policy),
		PeakReservedBytes: s.PeakReservedBytes, CapacityBytes: capacity}
	if s.Error != "" || s.Failures > 0 {
		a.Kind = schema.AdviceNoneFits
		a.Summary = noneFits(capacity, "pool, the recommended one", s.PeakReservedBytes, 0, s.Failures)
		if plan := tr.Config.PlanBytes(); s.Error != "" {
			// it could not even reserve its plan
			a.PeakReservedBytes, a.MissBytes = plan, plan-min(plan, capacity)
			a.Summary = fmt.Sprintf("nothing fits in %s: the recommended pool's plan alone needs %s", units.FormatBytes(capacity),
				units.FormatBytes(plan))
		}
		return a
	}
	a.Kind = schema.AdvicePool
	how := "record --pool"
	if tr.RequestLayer == string(requests.Framework) {
		how = "the pool library"
	}
	a.Summary = fmt.Sprintf("serve the requests from allocscope's pool (analyze --emit-config pool.json, then %s): "+
		"peak reserved %s", how, units.FormatBytes(s.PeakReservedBytes))
	return a
}

// savings is what the recommendation saves against today: memory when both peaks are known, time
// when the trace has call durations and the recommendation is the pool (whose calls the
// simulation times).
func savings(tr *schema.TraceReport, a *schema.Answer) schema.Savings {
	var s schema.Savings
	rec, now := a.Recommendation, a.Today
	switch rec.Kind {
	case schema.AdviceSetting, schema.AdviceKeep, schema.AdvicePool:
		if now.ReservedFrom != "" && rec.PeakReservedBytes > 0 {
			s.MemoryKnown = true
			s.MemoryBytes = int64(now.PeakReservedBytes) - int64(rec.PeakReservedBytes)
			if now.PeakReservedBytes > 0 {
				s.MemoryPercent = 100 * float64(s.MemoryBytes) / float64(now.PeakReservedBytes)
			}
		}
	}
	if rec.Kind == schema.AdvicePool && a.CallTimeKnown {
		s.TimeKnown, s.TimeNs = true, tr.Simulations[0].TimeSavedNs
		s.TimePercent = 100 * float64(s.TimeNs) / float64(a.CallNs)
	}
	return s
}
