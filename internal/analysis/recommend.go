package analysis

import (
	"fmt"
	"github.com/allocscope/allocscope/internal/requests"
	"math"

	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/pool"
)

const (
	mib = 1 << 20
	// rmmHeadroom is the margin of the suggested RMM maximum pool size over the simulated peak.
	rmmHeadroom = 1.10
	// neverRelease is cudaMemPoolAttrReleaseThreshold's "keep everything" value.
	neverRelease = math.MaxUint64
)

// recommendation is the size-class pool derived from a trace.
type recommendation struct {
	trace  string
	st     *stats.Result
	plan   sizeclass.Plan
	sizing whatif.Sizing
	splits []schema.Split
	config pool.Config
	// recordPool is the config simulated as record --pool runs it; nil when it cannot.
	recordPool *pool.DeferredPrediction
	// torch is the PYTORCH_CUDA_ALLOC_CONF search.
	torch *schema.TorchSearch
	// oom explains a PyTorch snapshot's out-of-memory; nil without one.
	oom *schema.OOMReport
	// paged is the paged variant sizeclass.ArenaRule names beside the one-region recommendation;
	// nil when none qualifies, or when it is the recommendation (--arena paged).
	paged *schema.PagedAlternative
}

// recommend builds the size-class pool of plan and sizing, its arena placing blocks by fit
// (written to pool.json only when it is not the default), keeping freed blocks per stream when
// perStream is set (see orderedStreams), its slots and arena multiplied by headroom (at least 1).
func recommend(name string, st *stats.Result, plan sizeclass.Plan, sizing whatif.Sizing, fit pool.Fit,
	perStream bool, headroom float64) *recommendation {
	headroom = max(headroom, 1)
	arena := uint64(math.Ceil(float64(sizing.ArenaPeakReservedBytes) * headroom))
	sc := &pool.SizeClassConfig{LargeThreshold: plan.Threshold,
		ArenaBytes: pool.AlignUp(arena, pool.DefaultAlignment), PerStream: perStream}
	if fit != pool.FitBest {
		sc.ArenaFit = fit
	}
	for i, size := range plan.Classes {
		slots := uint64(math.Ceil(float64(sizing.Slots[i]) * headroom))
		sc.Classes = append(sc.Classes, pool.Class{Size: size, Slots: slots})
	}
	return &recommendation{trace: name, st: st, plan: plan, sizing: sizing,
		config: pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass,
			Alignment: pool.DefaultAlignment, SizeClass: sc}}
}

// orderedStreams returns the number of distinct streams on which requests were stream-ordered:
// every stream of a framework's requests (PyTorch and RMM free blocks per stream), and the
// streams other than the legacy default stream (handle 0) of native requests, which only
// stream-ordered calls (cudaMallocAsync, cuMemAllocAsync, ...) carry.
//
// The rule for pool.SizeClassConfig.PerStream follows from it. A pool's Free does not wait for the
// device: a block freed on stream A may still be in use by work queued on A. Reusing it on A is
// safe (A runs in order), on another stream B it is not. So the recommended pool keeps freed
// blocks per stream when stream-ordered requests come on more than one stream, as PyTorch's
// caching allocator does. cudaMalloc/cudaFree requests all belong to the legacy default stream,
// whose work is ordered with every blocking stream's; with them and one other stream, or one
// stream, the setting stays off (it would only cost memory: a block freed on one stream could
// never serve the other).
func orderedStreams(st *stats.Result) int {
	streams := map[uint64]bool{}
	for _, g := range st.Groups {
		if g.Allocs > 0 && (g.Stream != 0 || st.RequestLayer == requests.Framework) {
			streams[g.Stream] = true
		}
	}
	return len(streams)
}

// policy is the recommended pool as the simulation runs it, with its memory map at its peak.
func (r *recommendation) policy() whatif.Policy {
	return whatif.Policy{Name: "recommended", Settings: r.settings(), Config: r.config, Map: true}
}

func (r *recommendation) settings() string { return settingsOf(r.config.SizeClass) }

// settingsOf describes a size-class pool in a few words.
func settingsOf(sc *pool.SizeClassConfig) string {
	arena := "arena " + render.Bytes(sc.ArenaBytes)
	if pg := sc.ArenaPaging; pg != nil {
		arena = fmt.Sprintf("paged arena ≤ %s mapped", render.Bytes(pg.BudgetBytes))
	}
	s := fmt.Sprintf("%d classes ≤ %s, %s", len(sc.Classes), render.Bytes(sc.LargeThreshold), arena)
	if sc.ArenaFit != "" {
		s += " " + string(sc.ArenaFit)
	}
	if sc.PerStream {
		s += ", per stream"
	}
	return s
}

// growArena returns the recommended policy with its arena grown by what the simulation had to
// add beyond the plan, when it had to.
func (r *recommendation) growArena(o whatif.Outcome) (whatif.Policy, bool) {
	if o.Err != nil || o.Stats.Fallbacks == 0 {
		return whatif.Policy{}, false
	}
	planned := r.classBytes() + r.config.SizeClass.ArenaBytes
	extra := o.Stats.PeakReservedBytes - min(planned, o.Stats.PeakReservedBytes)
	if extra == 0 {
		return whatif.Policy{}, false
	}
	sc := *r.config.SizeClass
	sc.ArenaBytes = pool.AlignUp(sc.ArenaBytes+extra, pool.DefaultAlignment)
	r.config.SizeClass = &sc
	return r.policy(), true
}

// pagedName and fixedName name the arena variant of the recommended pool that was not chosen.
const (
	pagedName = "paged-arena"
	fixedName = "fixed-arena"
)

// pagedPolicy returns the recommended pool with a paged arena (sizeclass.ArenaRule), when its
// one-region arena makes it reserve more than sizeclass.SlackCeiling times peak live and the
// class slots leave room for pages within that.
func (r *recommendation) pagedPolicy() (whatif.Policy, bool) {
	sc := *r.config.SizeClass
	peakLive := r.st.Requests.PeakLiveBytes
	ceiling := uint64(float64(peakLive) * sizeclass.SlackCeiling)
	classes := r.classBytes()
	if sc.ArenaPaging != nil || classes+sc.ArenaBytes <= ceiling || classes+sizeclass.PageBytes > ceiling ||
		r.sizing.LargePeakLiveBytes == 0 {
		return whatif.Policy{}, false
	}
	sc.ArenaBytes = pool.AlignUp(max(sizeclass.PagedAddressFactor*r.sizing.LargePeakLiveBytes, sc.ArenaBytes), sizeclass.PageBytes)
	sc.ArenaPaging = &pool.ArenaPaging{PageBytes: sizeclass.PageBytes,
		BudgetBytes: (ceiling - classes) / sizeclass.PageBytes * sizeclass.PageBytes}
	cfg := r.config
	cfg.SizeClass = &sc
	return whatif.Policy{Name: pagedName, Settings: settingsOf(&sc), Config: cfg, Map: true}, true
}

// choosePaged makes the paged variant (outs[at]) the recommendation when it stayed within its
// budget with no fallbacks or failures and few page operations (sizeclass.ArenaRule; any number
// with anyPageOps), swapping it with outs[0]; the variant not chosen keeps its
// row in the report under pagedName or fixedName.
func (r *recommendation) choosePaged(outs []whatif.Outcome, at int, anyPageOps bool) {
	o := outs[at]
	if !r.pagedQualifies(o, anyPageOps) {
		return
	}
	r.config = o.Policy.Config
	outs[0].Policy.Name, o.Policy.Name = fixedName, "recommended"
	outs[0], outs[at] = o, outs[0]
}

// pagedQualifies reports whether the paged variant's outcome o stayed within its budget with no
// fallbacks or failures and few page operations (any number with anyPageOps).
func (r *recommendation) pagedQualifies(o whatif.Outcome, anyPageOps bool) bool {
	pg := o.Policy.Config.SizeClass.ArenaPaging
	requests := o.Stats.Allocs + o.Stats.Frees
	return o.Err == nil && o.Stats.Fallbacks == 0 && o.Stats.Failures == 0 &&
		o.Stats.PeakReservedBytes <= r.classBytes()+pg.BudgetBytes &&
		(anyPageOps || o.PageOps*sizeclass.MaxPageOpsShare <= requests)
}

// notePaged names the paged variant (outs[at]) as the alternative to the one-region recommendation
// (outs[0]) when it qualifies under sizeclass.ArenaRule: the recommendation stays the pool.json
// every consumer runs, and --arena paged writes the variant.
func (r *recommendation) notePaged(outs []whatif.Outcome, at int) {
	if o := outs[at]; r.pagedQualifies(o, false) {
		r.paged = &schema.PagedAlternative{PeakReservedBytes: o.Stats.PeakReservedBytes, PageOps: o.PageOps,
			SavedBytes: int64(outs[0].Stats.PeakReservedBytes) - int64(o.Stats.PeakReservedBytes)}
	}
}

func (r *recommendation) classBytes() uint64 {
	var n uint64
	for _, c := range r.config.SizeClass.Classes {
		n += c.Size * c.Slots
	}
	return n
}

// recommendedPolicies lists the what-if policies that depend on the recommendation: the recommended
// pool and RMM's.
func recommendedPolicies(rec *recommendation) []whatif.Policy {
	// RMM's pool: one best-fit coalescing arena for every request, first region the recommended
	// pool's size (growing on demand beyond it).
	bestfit := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit: &pool.BestFitConfig{InitialBytes: pool.AlignUp(rec.classBytes()+rec.config.SizeClass.ArenaBytes, 2*mib)}}
	return []whatif.Policy{rec.policy(),
		{Name: "bestfit", Settings: "initial " + render.Bytes(bestfit.BestFit.InitialBytes) + " (RMM pool)", Config: bestfit}}
}

// modelPolicies lists the what-if policies that need only the statistics: PyTorch's allocator
// with its defaults and with expandable segments, CUDA's stream-ordered pool and raw cudaMalloc.
// They follow recommendedPolicies in the report. PyTorch's other settings are the search's
// (torchsearch.go), whose best is never worse than the defaults.
func modelPolicies(capacity uint64) []whatif.Policy {
	cfg := func(p pool.Policy) pool.Config { return pool.Config{Version: pool.ConfigVersion, Policy: p} }
	torch := func(name string, t pool.PyTorchConfig) whatif.Policy {
		c := cfg(pool.PolicyPyTorch)
		t.CapacityBytes = capacity
		c.PyTorch = &t
		return whatif.Policy{Name: name, Settings: allocConf(t), Config: c, Map: name == "pytorch"}
	}
	ordered := cfg(pool.PolicyStreamOrdered)
	ordered.StreamOrdered = &pool.StreamOrderedConfig{}
	keep := cfg(pool.PolicyStreamOrdered)
	keep.StreamOrdered = &pool.StreamOrderedConfig{ReleaseThresholdBytes: neverRelease}
	return []whatif.Policy{
		torch("pytorch", pool.PyTorchConfig{}),
		torch("pytorch-expandable", pool.PyTorchConfig{ExpandableSegments: true}),
		{Name: "stream-ordered", Settings: "release threshold 0 (CUDA default)", Config: ordered},
		{Name: "stream-ordered-keep", Settings: "release threshold max", Config: keep},
		{Name: "raw", Settings: "cudaMalloc/cudaFree per request", Config: cfg(pool.PolicyRaw)},
	}
}

// allocConf writes a PyTorchConfig as a PYTORCH_CUDA_ALLOC_CONF value, "(defaults)" for none.
func allocConf(t pool.PyTorchConfig) string { return render.ConfOrDefaults(t.AllocConf()) }
