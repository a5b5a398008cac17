package analysis

import (
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// assemble builds the report of one stream from the stages' results; callsite names the callsites
// of the memory maps' blocks.
func assemble(name string, st *stats.Result, rec *recommendation, outs []whatif.Outcome,
	callsite func(pid uint32, id uint64) string) *schema.TraceReport {
	tr := &schema.TraceReport{Name: name, Events: st.Events, RequestLayer: string(st.RequestLayer),
		Requests: st.Requests, Upstream: st.Upstream, Groups: st.Groups, Anomalies: st.Anomalies,
		TopCallsites: st.TopCallsites, PeakCallsites: st.PeakCallsites, Detail: st.Detail}
	tr.SizeClasses = sizeClassPlan(st, rec)
	for i, o := range outs {
		s := simulation(o, st)
		// The recommended pool and PyTorch's defaults; not the arena variant that was not chosen.
		if o.Map != nil && o.Err == nil && (i == 0 || o.Policy.Name == "pytorch") {
			s.PeakMap = peakMap(o.Map, callsite)
		}
		tr.Simulations = append(tr.Simulations, s)
	}
	tr.Fidelity = fidelity(st, outs)
	tr.TorchSearch = rec.torch
	tr.OOM = rec.oom
	cfg := rec.config
	cfg.Prediction = prediction(name, st, tr.Simulations[0])
	cfg.Prediction.RecordPool = rec.recordPool
	cfg.Equivalents = equivalents(tr.Simulations, rec.torch)
	tr.Config = &cfg
	return tr
}

func sizeClassPlan(st *stats.Result, rec *recommendation) *schema.SizeClassPlan {
	sc := rec.config.SizeClass
	p := &schema.SizeClassPlan{Alignment: pool.DefaultAlignment, LargeThreshold: sc.LargeThreshold,
		ThresholdRule: sizeclass.ThresholdRule, Thresholds: rec.splits,
		DistinctSizes: rec.plan.DistinctSizes, K: rec.plan.K, KRule: sizeclass.KRule,
		ClassBytes: rec.classBytes(), LargePeakLiveBytes: rec.sizing.LargePeakLiveBytes,
		ArenaBytes: sc.ArenaBytes, PeakLiveBytes: st.Requests.PeakLiveBytes, Classes: []schema.ClassPlan{}}
	if rec.plan.Forced {
		p.KRule = "forced by --k"
	}
	p.ArenaRule = sizeclass.ArenaRule
	p.PagedAlternative = rec.paged
	p.PoolBytes = p.ClassBytes + p.ArenaBytes
	if pg := sc.ArenaPaging; pg != nil {
		p.ArenaPaged, p.ArenaBudgetBytes = true, pg.BudgetBytes
		p.PoolBytes = p.ClassBytes + pg.BudgetBytes
	}
	for _, c := range sc.Classes {
		p.Classes = append(p.Classes, schema.ClassPlan{Size: c.Size, Slots: c.Slots})
	}
	for _, s := range st.Sizes {
		if s.Size == 0 || s.Size > sc.LargeThreshold || len(p.Classes) == 0 {
			continue
		}
		c := &p.Classes[sizeclass.ClassOf(rec.plan.Classes, s.Size)]
		c.Requests += s.Count
		c.PeakLive += s.AtPeak
		c.WasteAtPk += s.AtPeak * (c.Size - s.Size)
	}
	for _, w := range rec.plan.Curve {
		p.Curve = append(p.Curve, schema.KWaste{K: w.K, PeakWaste: w.PeakWaste,
			TotalWaste: w.TotalWaste, Objective: w.Objective})
	}
	return p
}

func simulation(o whatif.Outcome, st *stats.Result) schema.Simulation {
	s := schema.Simulation{Name: o.Policy.Name, Policy: string(o.Policy.Config.Policy),
		Settings: o.Policy.Settings, PeakLiveBytes: o.Stats.PeakLiveBytes,
		PeakReservedBytes: o.Stats.PeakReservedBytes,
		InternalFragBytes: o.Peak.InternalFragmentation(), ExternalFragBytes: o.Peak.ExternalFragmentation(),
		UpstreamReserves: o.Stats.UpstreamReserves, UpstreamReleases: o.Stats.UpstreamReleases,
		UpstreamBytes: o.ReservedBytes, Failures: o.Stats.Failures, Fallbacks: o.Stats.Fallbacks, PageOps: o.PageOps,
		PredictedCallNs: int64(o.PredictedNs), MeasuredCallNs: st.MeasuredCallNs}
	s.TimeSavedNs = s.MeasuredCallNs - s.PredictedCallNs
	if live := max(s.PeakLiveBytes, st.Requests.PeakLiveBytes); live > 0 {
		s.ReservedRatio = float64(s.PeakReservedBytes) / float64(live)
	}
	if o.Err != nil {
		s.Error = o.Err.Error()
	}
	return s
}

// fidelity compares the PyTorch model's segments with the real ones of a PyTorch snapshot:
// with expandable segments when the snapshot maps memory, else with the default settings.
func fidelity(st *stats.Result, outs []whatif.Outcome) *schema.Fidelity {
	real := st.NativeSegments + st.NativeMaps
	if st.RequestLayer != requests.Framework || real == 0 {
		return nil
	}
	name := "pytorch"
	if st.NativeMaps > 0 {
		name = "pytorch-expandable"
	}
	for _, o := range outs {
		if o.Policy.Name != name || o.Err != nil {
			continue
		}
		return &schema.Fidelity{Model: name, RealSegments: real, RealBytes: st.NativeSegmentBytes,
			ModelSegments: o.Reserves, ModelBytes: o.ReservedBytes,
			CountMatch: matchPercent(real, o.Reserves), BytesMatch: matchPercent(st.NativeSegmentBytes, o.ReservedBytes)}
	}
	return nil
}

// matchPercent is 100 × min/max (100 when both are 0).
func matchPercent(a, b uint64) float64 {
	if a == b {
		return 100
	}
	return 100 * float64(min(a, b)) / float64(max(a, b))
}

func prediction(name string, st *stats.Result, s schema.Simulation) *pool.Prediction {
	return &pool.Prediction{Trace: name, Events: st.Requests.Allocs + st.Requests.Frees,
		PeakLiveBytes: st.Requests.PeakLiveBytes, PeakReservedBytes: s.PeakReservedBytes,
		UpstreamCalls: s.UpstreamReserves + s.UpstreamReleases, Fallbacks: s.Fallbacks,
		Failures: s.Failures, AllocatorTimeSavedNs: s.TimeSavedNs}
}

// equivalents derives the settings of other allocators: the best PYTORCH_CUDA_ALLOC_CONF of the
// search (empty when the defaults are best or nothing fits), RMM's pool sized to the best-fit
// simulation's peak (maximum with 10% headroom), and the cudaMemPool release threshold that kept
// every byte the stream-ordered pool ever needed.
func equivalents(sims []schema.Simulation, torch *schema.TorchSearch) *pool.Equivalents {
	eq := &pool.Equivalents{}
	if torch != nil && torch.Fits && len(torch.Best) > 0 {
		eq.PyTorchAllocConf = torch.Best[0].Conf
	}
	for i := range sims {
		s := &sims[i]
		if s.Error != "" {
			continue
		}
		switch s.Name {
		case "bestfit":
			eq.RMMInitialPoolBytes = pool.AlignUp(s.PeakReservedBytes, mib)
			eq.RMMMaximumPoolBytes = pool.AlignUp(uint64(float64(eq.RMMInitialPoolBytes)*rmmHeadroom), mib)
		case "stream-ordered-keep":
			eq.CudaMemPoolReleaseThreshold = pool.AlignUp(s.PeakReservedBytes, mib)
		}
	}
	return eq
}
