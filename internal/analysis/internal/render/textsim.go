package render

import (
	"fmt"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// simulations writes the what-if table and each policy's settings. Its "saved" column is the time
// inside allocation calls the trace measured minus what the policy's model predicts: n/a when the
// trace has no call durations; for raw cudaMalloc on a trace of device calls, the program's own
// allocator, "today" (nothing to save against itself).
func (t *textWriter) simulations(sims []schema.Simulation, layer string) {
	t.printf("\nWHAT-IF SIMULATION (peak reserved, its ratio to peak live, fragmentation at that peak,\n" +
		"upstream calls, failed requests, fallbacks beyond the plan, allocator time saved)\n")
	rows := []string{"  policy\treserved\tx live\tint frag\text frag\tcalls\tfails\tfallbk\tsaved"}
	negative := false
	for _, s := range sims {
		if s.Error != "" {
			rows = append(rows, fmt.Sprintf("  %s\terror\t\t\t\t\t\t\t", s.Name))
			continue
		}
		saved := timeSaved(s, layer)
		negative = negative || (saved != "n/a" && saved != "today" && s.TimeSavedNs < 0)
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s", s.Name,
			Bytes(s.PeakReservedBytes), s.ReservedRatio, Bytes(s.InternalFragBytes),
			Bytes(s.ExternalFragBytes), Count(s.UpstreamReserves+s.UpstreamReleases),
			Count(s.Failures), Count(s.Fallbacks), saved))
	}
	t.table(rows)
	if negative {
		t.printf("  a negative saved is a cost: the policy's model spends that much more time in calls\n")
	}
	for _, s := range sims {
		t.printf("  %-20s %s\n", s.Name, wrap(policyNote(s, sims), 77, "                       "))
		if s.Error != "" {
			t.printf("  %-20s %s\n", "", wrap("error: "+s.Error, 77, "                       "))
		}
	}
}

// timeSaved is a simulation's "saved" cell.
func timeSaved(s schema.Simulation, layer string) string {
	switch {
	case s.MeasuredCallNs == 0:
		return "n/a"
	case s.Name == "raw" && layer == "device":
		return "today"
	}
	return Duration(float64(s.TimeSavedNs))
}

// policyNote is a policy's settings, its page operations, and for a PyTorch model other than the
// defaults' that reserves more than them, by how much.
func policyNote(s schema.Simulation, sims []schema.Simulation) string {
	note := s.Settings
	if s.PageOps > 0 {
		note += fmt.Sprintf("; %s page operation", Count(s.PageOps))
		if s.PageOps != 1 {
			note += "s"
		}
	}
	if s.Policy != "pytorch" || s.Name == "pytorch" || s.Error != "" {
		return note
	}
	for _, d := range sims {
		if d.Name == "pytorch" && d.Error == "" && s.PeakReservedBytes > d.PeakReservedBytes {
			note += fmt.Sprintf("; reserves %s more than the defaults", Bytes(s.PeakReservedBytes-d.PeakReservedBytes))
		}
	}
	return note
}
