package stats

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/trace"
)

const callSketchCap = 1024

// MaxSize is the largest allocation size believed (requests.MaxSize): a successful allocation
// claiming more comes from a corrupt trace; it is skipped with a warning (the request stream
// leaves it out too), so that byte sums cannot overflow.
const MaxSize = requests.MaxSize

// Collector is the statistics stage: it takes every event of a trace once, in order.
type Collector struct {
	fns       *interner
	native    *tracker
	framework *tracker
	events    uint64
	calls     [][buckets]*Sketch // by function id and log2 size bucket
	measured  int64              // total duration of native device alloc and free calls
	segments  uint64
	segBytes  uint64
	maps      uint64
	absurd    uint64               // allocations above MaxSize, skipped
	layer     requests.LayerChoice // of every event, those skipped included
	freeFns   []bool               // by function id
}

// NewCollector returns an empty Collector. For each of thresholds it tracks the peak live bytes
// of the requests above it (those a pool would send to its large-block arena).
func NewCollector(thresholds []uint64) *Collector {
	fns := newInterner()
	return &Collector{fns: fns, native: newTracker(fns, thresholds), framework: newTracker(fns, thresholds)}
}

// NameCallsites makes the reports name callsites with names (a PyTorch snapshot's stacks), where
// it knows them; the others stay addresses.
func (c *Collector) NameCallsites(names func(pid uint32, id uint64) (string, bool)) {
	c.fns.callsites = names
}

// KeepDetail makes the collector keep the HTML report's timeline (Result.Detail): live bytes at
// several resolutions with the event behind each point. It costs the statistics pass time and
// a few MiB.
func (c *Collector) KeepDetail() {
	c.native.detail = &detailTimeline{keep: c.native.keep}
	c.framework.detail = &detailTimeline{keep: c.framework.keep}
}

// CallsiteName names a callsite of process pid as the reports do: the name NameCallsites gives
// it, else its address.
func (c *Collector) CallsiteName(pid uint32, id uint64) string { return c.fns.callsite(pid, id) }

// Add processes a batch of events.
func (c *Collector) Add(batch []trace.Event) {
	for i := range batch {
		e := &batch[i]
		c.events++
		c.layer.Add(e)
		if e.Request() == trace.RequestAlloc && e.Size > MaxSize && e.OK() {
			c.absurd++
			continue
		}
		if e.Layer == trace.LayerFramework {
			c.framework.add(e)
			continue
		}
		c.nativeCall(e, c.native.add(e))
	}
}

// nativeCall counts a native event's call; fn is its function's id when the tracker interned it,
// else -1.
func (c *Collector) nativeCall(e *trace.Event, fn int32) {
	if e.Op == trace.OpMap && e.OK() {
		c.maps++
		c.segBytes += e.Size
		return
	}
	req := e.Request()
	if req == trace.RequestNone {
		return
	}
	if e.Op == trace.OpAlloc && e.OK() {
		c.segments++
		c.segBytes += e.Size
	}
	if e.DurationNs <= 0 {
		return
	}
	c.measured += e.DurationNs
	if fn < 0 {
		fn = int32(c.fns.id(e.Function))
	}
	bucket := log2Bucket(e.Size)
	for int(fn) >= len(c.calls) {
		c.calls = append(c.calls, [buckets]*Sketch{})
		c.freeFns = append(c.freeFns, false)
	}
	if req == trace.RequestFree {
		c.freeFns[fn] = true
	}
	s := c.calls[fn][bucket]
	if s == nil {
		s = NewSketch(callSketchCap)
		c.calls[fn][bucket] = s
	}
	s.Add(float64(e.DurationNs))
}

// Result is what the statistics stage found.
type Result struct {
	Events       uint64
	RequestLayer requests.Layer // whose events are the requests (requests.LayerChoice)
	Requests     *schema.Stats
	Upstream     *schema.Stats // nil unless the requests are framework events
	Groups       []*schema.Stats
	Anomalies    schema.Anomalies
	Sizes        []SizeTally // request sizes, ascending
	// LargePeakLiveBytes[i] is the peak of live bytes of the requests above thresholds[i].
	LargePeakLiveBytes []uint64
	// Native segment allocations (successful native device allocations plus maps) for fidelity.
	NativeSegments, NativeSegmentBytes, NativeMaps uint64
	MeasuredCallNs                                 int64 // total duration of the native device alloc and free calls
	Calls                                          *CallDurations
	Warnings                                       []string
	// TopCallsites are the callsites that allocated the most bytes; PeakCallsites those that held
	// the most at the peak of live bytes.
	TopCallsites, PeakCallsites []schema.CallsiteTally
	// Sites is every callsite of the requests, the first allocated first (package framework reads
	// them).
	Sites  []SiteSummary
	Detail *schema.Detail // the HTML report's timeline, when kept (KeepDetail)
}

// Finish ends the stage and returns its result; top is the number of exact sizes to list.
func (c *Collector) Finish(top int) *Result {
	req, up := c.native, (*tracker)(nil)
	layer := c.layer.Layer()
	if layer == requests.Framework {
		req, up = c.framework, c.native
	}
	req.finishLeaks()
	req.materialize()
	r := &Result{Events: c.events, RequestLayer: layer, Anomalies: req.anomalies(),
		NativeSegments: c.segments, NativeSegmentBytes: c.segBytes, NativeMaps: c.maps,
		MeasuredCallNs: c.measured, Calls: c.callDurations(), LargePeakLiveBytes: req.largePeak}
	r.Requests = req.overall.result("all", top, req.medianFree(), req.sizes)
	r.TopCallsites, r.PeakCallsites = req.sites.result(c.fns.callsite)
	r.Sites = req.sites.summaries(c.fns.callsite, c.fns.name)
	for _, p := range req.timeline.Points() {
		r.Requests.Timeline = append(r.Requests.Timeline, schema.Point{X: p[0], Y: p[1]})
	}
	if req.detail != nil {
		r.Detail = req.detail.finish(c.fns.callsite)
	}
	for _, p := range req.overall.lifetime.CDF(200) {
		r.Requests.LifetimeCDF = append(r.Requests.LifetimeCDF, schema.Point{X: p[0], Y: p[1]})
	}
	if up != nil && up.events > 0 {
		up.materialize()
		r.Upstream = up.overall.result("upstream", top, up.medianFree(), up.sizes)
	}
	for _, g := range req.groups {
		if g.allocs == 0 && g.frees == 0 && len(req.groups) > 1 {
			continue
		}
		r.Groups = append(r.Groups, g.result(scopeName(g.pid, g.device, g.stream), top, req.medianFree(), req.sizes))
	}
	slices.SortFunc(r.Groups, func(a, b *schema.Stats) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Device, b.Device), cmp.Compare(a.Stream, b.Stream))
	})
	r.Sizes = req.sizes.tallies()
	slices.SortFunc(r.Sizes, func(a, b SizeTally) int { return cmp.Compare(a.Size, b.Size) })
	if c.absurd > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d allocations of more than 256 TiB skipped "+
			"(corrupt sizes)", c.absurd))
	}
	if req.sizes.folded {
		r.Warnings = append(r.Warnings, fmt.Sprintf("more than %d distinct request sizes: "+
			"the rest are counted at their log2 bucket's upper bound", maxDistinctSizes))
	}
	return r
}
