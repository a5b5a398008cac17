package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/pool"
)

// The PYTORCH_CUDA_ALLOC_CONF search: which values it tries, and how many of the best it reports.
var (
	// splitLadder is the max_split_size_mb values tried (PyTorch takes values above 20); only those
	// below twice the largest request make a difference and are tried.
	splitLadder = []uint64{32, 64, 128, 256, 512, 1024, 2048, 4096}
	// roundupLadder is the roundup_power2_divisions values tried (0: unset).
	roundupLadder = []uint64{0, 2, 4, 8, 16}
	// roundupRangeLadder is the per-size-range forms of roundup_power2_divisions tried: fewer
	// divisions for small requests, more for large ones. Each gives its last size the divisions
	// of its `>`, so that every PyTorch 2.x parser reads it the same (see pool.RoundupRange).
	roundupRangeLadder = [][]pool.RoundupRange{
		{{SizeMB: 256, Divisions: 4}, {SizeMB: 512, Divisions: 8}, {Divisions: 8}},                             // [256:4,512:8,>:8]
		{{SizeMB: 64, Divisions: 2}, {SizeMB: 128, Divisions: 4}, {SizeMB: 256, Divisions: 8}, {Divisions: 8}}, // [64:2,128:4,256:8,>:8]
	}
	// gcLadder is the garbage_collection_threshold values tried when the capacity is known.
	gcLadder = []float64{0.6, 0.8, 0.95}
)

const (
	torchBestShown   = 5
	asyncBackendConf = "backend:cudaMallocAsync"
	// maxSearchRequests is the most requests of a native trace the search runs on unasked
	// (Options.PyTorchSearch).
	maxSearchRequests = 2_000_000
)

// torchCandidates lists the settings the search simulates: expandable_segments off and on, each
// with max_split_size_mb unset or on its ladder, each with roundup_power2_divisions unset, on its
// ladder or in one of its range forms; and backend:cudaMallocAsync, modelled as CUDA's
// stream-ordered pool keeping all its memory. These run on unbounded memory (see
// schema.TorchSearch). With a capacity, garbage_collection_threshold on its ladder, each with
// max_split_size_mb unset or on its ladder, runs within the capacity (it acts only there), with
// expandable_segments off (with them no segment is ever wholly free to collect).
func torchCandidates(st *stats.Result, capacity uint64) []whatif.Policy {
	var out []whatif.Policy
	add := func(t pool.PyTorchConfig) {
		bounded := t.GarbageCollectionThreshold > 0
		if bounded {
			t.CapacityBytes = capacity
		}
		c := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch, PyTorch: &t}
		out = append(out, whatif.Policy{Name: "search", Settings: t.AllocConf(), Config: c, Unbounded: !bounded})
	}
	splits := splitValues(st)
	for _, expandable := range []bool{false, true} {
		for _, split := range splits {
			for _, div := range roundupLadder {
				add(pool.PyTorchConfig{ExpandableSegments: expandable, MaxSplitSizeMB: split, RoundupPower2Divisions: div})
			}
			for _, ranges := range roundupRangeLadder {
				add(pool.PyTorchConfig{ExpandableSegments: expandable, MaxSplitSizeMB: split, RoundupPower2Ranges: ranges})
			}
		}
	}
	for _, split := range splits {
		for _, gc := range gcLadder {
			if capacity > 0 { // without one, garbage collection never acts
				add(pool.PyTorchConfig{MaxSplitSizeMB: split, GarbageCollectionThreshold: gc})
			}
		}
	}
	async := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyStreamOrdered,
		StreamOrdered: &pool.StreamOrderedConfig{ReleaseThresholdBytes: neverRelease}}
	return append(out, whatif.Policy{Name: "search", Settings: asyncBackendConf, Config: async, Unbounded: true})
}

// splitValues is the max_split_size_mb values the search tries: unset (0), and those of the
// ladder below twice the largest request.
func splitValues(st *stats.Result) []uint64 {
	var largest uint64
	if n := len(st.Sizes); n > 0 {
		largest = st.Sizes[n-1].Size
	}
	splits := []uint64{0}
	for _, mb := range splitLadder {
		if mb<<20 < 2*largest {
			splits = append(splits, mb)
		}
	}
	return splits
}

// torchSearch ranks the search's outcomes of the caching allocator's settings: first the
// settings that fit the capacity (every setting, without one), then the fewest failed requests,
// the fewest retries, the lowest peak reserved, the fewest cudaMalloc calls, the fewest options
// set. The defaults are among the candidates, so the best is never worse than them.
// backend:cudaMallocAsync is not ranked: its model is CUDA's stream-ordered pool, not PyTorch's
// own accounting under that backend, and on the H200 real runs reserved up to a third more than it
// predicts (docs/analyze.md); it is reported apart (schema.TorchSearch.AsyncBackend).
func torchSearch(outs []whatif.Outcome, capacity uint64) *schema.TorchSearch {
	all := make([]schema.TorchSetting, 0, len(outs))
	var defaults schema.TorchSetting
	var async *schema.TorchSetting
	for _, o := range outs {
		s := torchSetting(o)
		switch {
		case s.Error != "":
			continue
		case s.Conf == asyncBackendConf:
			async = &s
			continue
		case s.Conf == "":
			defaults = s
		}
		all = append(all, s)
	}
	fits := func(s schema.TorchSetting) bool {
		return s.Failures == 0 && s.Retries == 0 && (capacity == 0 || s.PeakReservedBytes <= capacity)
	}
	slices.SortStableFunc(all, func(a, b schema.TorchSetting) int {
		if fa, fb := fits(a), fits(b); fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Failures, b.Failures), cmp.Compare(a.Retries, b.Retries),
			cmp.Compare(a.PeakReservedBytes, b.PeakReservedBytes), cmp.Compare(a.Segments, b.Segments),
			cmp.Compare(a.Settings, b.Settings), strings.Compare(a.Conf, b.Conf))
	})
	for i := range all {
		all[i].SavedBytes = int64(defaults.PeakReservedBytes) - int64(all[i].PeakReservedBytes)
	}
	if async != nil {
		async.SavedBytes = int64(defaults.PeakReservedBytes) - int64(async.PeakReservedBytes)
	}
	defaults.SavedBytes = 0
	ts := &schema.TorchSearch{CapacityBytes: capacity, Simulated: len(outs), Defaults: defaults,
		Best: all[:min(torchBestShown, len(all))], AsyncBackend: async}
	if len(all) > 0 {
		ts.Fits = fits(all[0])
		if !ts.Fits && capacity > 0 && all[0].PeakReservedBytes > capacity {
			ts.MissBytes = all[0].PeakReservedBytes - capacity
		}
	}
	return ts
}

// bestWithin returns the best setting (torchSearch's order) whose peak reserved stays within
// capacity, or nil.
func bestWithin(outs []whatif.Outcome, capacity uint64) *schema.TorchSetting {
	ts := torchSearch(outs, capacity)
	if !ts.Fits {
		return nil
	}
	best := ts.Best[0]
	return &best
}

// torchSetting is what one candidate did.
func torchSetting(o whatif.Outcome) schema.TorchSetting {
	s := schema.TorchSetting{Conf: o.Policy.Settings, Settings: len(pool.SplitAllocConf(o.Policy.Settings)),
		PeakReservedBytes: o.Stats.PeakReservedBytes, Segments: o.Stats.UpstreamReserves,
		Releases: o.Stats.UpstreamReleases, Failures: o.Stats.Failures, Retries: o.Stats.UpstreamFailures}
	if o.Err != nil {
		s.Error = o.Err.Error()
	}
	return s
}

// searchSummary is the line the report gives a search that found nothing within the capacity.
func searchSummary(ts *schema.TorchSearch) string {
	if ts == nil || ts.Fits || len(ts.Best) == 0 {
		return ""
	}
	best := ts.Best[0]
	return fmt.Sprintf("no PYTORCH_CUDA_ALLOC_CONF setting fits in %d bytes: the closest, %q, needs %d bytes, %d more",
		ts.CapacityBytes, render.ConfOrDefaults(best.Conf), best.PeakReservedBytes, ts.MissBytes)
}
