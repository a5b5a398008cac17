package analysis

import (
	"testing"

	"github.com/allocscope/allocscope/analysis/internal/whatif"
	"github.com/allocscope/allocscope/pool"
)

// The ranking: settings within the capacity first, then the lowest peak, then the fewest
// cudaMalloc calls, then the fewest options; an OOM's fitting setting is the best within its room.
func TestTorchSearchRanking(t *testing.T) {
	out := func(conf string, peak, reserves, failures uint64) whatif.Outcome {
		return whatif.Outcome{Policy: whatif.Policy{Settings: conf},
			Stats: pool.Stats{PeakReservedBytes: peak, UpstreamReserves: reserves, Failures: failures}}
	}
	outs := []whatif.Outcome{
		out("", 100<<20, 5, 0),
		out("expandable_segments:True", 80<<20, 9, 0),
		out("max_split_size_mb:64,expandable_segments:True", 80<<20, 9, 0),
		out("roundup_power2_divisions:4", 80<<20, 4, 0),
		out("max_split_size_mb:32", 70<<20, 4, 3),
	}
	ts := torchSearch(outs, 0)
	got := []string{}
	for _, s := range ts.Best {
		got = append(got, s.Conf)
	}
	want := []string{"roundup_power2_divisions:4", "expandable_segments:True", "max_split_size_mb:64,expandable_segments:True",
		"", "max_split_size_mb:32"}
	if !ts.Fits || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] ||
		got[4] != want[4] || ts.Best[0].SavedBytes != 20<<20 || ts.Defaults.PeakReservedBytes != 100<<20 {
		t.Errorf("ranking %q (fits %v, saved %d), want %q", got, ts.Fits, ts.Best[0].SavedBytes, want)
	}
	if ts := torchSearch(outs, 60<<20); ts.Fits || ts.MissBytes != 20<<20 || ts.Best[0].Conf != "roundup_power2_divisions:4" {
		t.Errorf("within 60 MiB: fits %v, miss %d, closest %q; want none, 20 MiB, roundup_power2_divisions:4", ts.Fits, ts.MissBytes, ts.Best[0].Conf)
	}
	if s := bestWithin(outs, 90<<20); s == nil || s.Conf != "roundup_power2_divisions:4" {
		t.Errorf("best within 90 MiB = %+v", s)
	}
	if s := bestWithin(outs, 75<<20); s != nil {
		t.Errorf("best within 75 MiB = %+v, want none (the 70 MiB one fails requests)", s)
	}
}
