package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/analysis/internal/model"
	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/analysis/internal/whatif"
	"github.com/allocscope/allocscope/pool"
)

// The PYTORCH_CUDA_ALLOC_CONF search: which values it tries, and how many of the best it reports.
var (
	// splitLadder is the max_split_size_mb values tried (PyTorch takes values above 20); only those
	// below twice the largest request make a difference and are tried.
	splitLadder = []uint64{32, 64, 128, 256, 512, 1024, 2048, 4096}
	// roundupLadder is the roundup_power2_divisions values tried (0: unset).
	roundupLadder = []uint64{0, 2, 4, 8, 16}
)

const (
	torchBestShown   = 5
	asyncBackendConf = "backend:cudaMallocAsync"
	// maxSearchRequests is the most requests of a native trace the search runs on unasked
	// (Options.PyTorchSearch).
	maxSearchRequests = 2_000_000
)

// torchCandidates lists the settings the search simulates: expandable_segments off and on, each
// with max_split_size_mb unset or on its ladder, each with roundup_power2_divisions unset or on its
// ladder; and backend:cudaMallocAsync, modelled as CUDA's stream-ordered pool keeping all its memory.
// All run on unbounded memory (see model.TorchSearch).
func torchCandidates(st *stats.Result) []whatif.Policy {
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
	var out []whatif.Policy
	for _, expandable := range []bool{false, true} {
		for _, split := range splits {
			for _, div := range roundupLadder {
				t := pool.PyTorchConfig{ExpandableSegments: expandable, MaxSplitSizeMB: split, RoundupPower2Divisions: div}
				c := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch, PyTorch: &t}
				out = append(out, whatif.Policy{Name: "search", Settings: torchConf(t), Config: c, Unbounded: true})
			}
		}
	}
	async := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyStreamOrdered,
		StreamOrdered: &pool.StreamOrderedConfig{ReleaseThresholdBytes: neverRelease}}
	return append(out, whatif.Policy{Name: "search", Settings: asyncBackendConf, Config: async, Unbounded: true})
}

// torchConf is the PYTORCH_CUDA_ALLOC_CONF value of t ("" for the defaults).
func torchConf(t pool.PyTorchConfig) string {
	if s := allocConf(t); s != "(defaults)" {
		return s
	}
	return ""
}

// torchSearch ranks the search's outcomes: first the settings that fit the capacity (every
// setting, without one), then the fewest failed requests, the lowest peak reserved, the fewest
// cudaMalloc calls, the fewest options set. The defaults are among the candidates, so the best is never worse than them.
func torchSearch(outs []whatif.Outcome, capacity uint64) *model.TorchSearch {
	all := make([]model.TorchSetting, 0, len(outs))
	var defaults model.TorchSetting
	for _, o := range outs {
		s := torchSetting(o)
		if s.Error != "" {
			continue
		}
		if s.Conf == "" {
			defaults = s
		}
		all = append(all, s)
	}
	fits := func(s model.TorchSetting) bool {
		return s.Failures == 0 && (capacity == 0 || s.PeakReservedBytes <= capacity)
	}
	slices.SortStableFunc(all, func(a, b model.TorchSetting) int {
		if fa, fb := fits(a), fits(b); fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Failures, b.Failures), cmp.Compare(a.PeakReservedBytes, b.PeakReservedBytes), cmp.Compare(a.Segments, b.Segments),
			cmp.Compare(a.Settings, b.Settings), strings.Compare(a.Conf, b.Conf))
	})
	for i := range all {
		all[i].SavedBytes = int64(defaults.PeakReservedBytes) - int64(all[i].PeakReservedBytes)
	}
	defaults.SavedBytes = 0
	ts := &model.TorchSearch{CapacityBytes: capacity, Simulated: len(outs), Defaults: defaults,
		Best: all[:min(torchBestShown, len(all))]}
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
func bestWithin(outs []whatif.Outcome, capacity uint64) *model.TorchSetting {
	ts := torchSearch(outs, capacity)
	if !ts.Fits {
		return nil
	}
	best := ts.Best[0]
	return &best
}

// torchSetting is what one candidate did.
func torchSetting(o whatif.Outcome) model.TorchSetting {
	s := model.TorchSetting{Conf: o.Policy.Settings, PeakReservedBytes: o.Stats.PeakReservedBytes,
		Segments: o.Stats.UpstreamReserves, Releases: o.Stats.UpstreamReleases, Failures: o.Stats.Failures}
	if s.Conf != "" {
		s.Settings = strings.Count(s.Conf, ",") + 1
	}
	if o.Err != nil {
		s.Error = o.Err.Error()
	}
	return s
}

// searchSummary is the line the report gives a search that found nothing within the capacity.
func searchSummary(ts *model.TorchSearch) string {
	if ts == nil || ts.Fits || len(ts.Best) == 0 {
		return ""
	}
	best := ts.Best[0]
	return fmt.Sprintf("no PYTORCH_CUDA_ALLOC_CONF setting fits in %d bytes: the closest, %q, needs %d bytes, %d more",
		ts.CapacityBytes, confOrDefaults(best.Conf), best.PeakReservedBytes, ts.MissBytes)
}

func confOrDefaults(conf string) string {
	if conf == "" {
		return "(defaults)"
	}
	return conf
}
