package record

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/allocscope/allocscope/intercept"
	"github.com/allocscope/allocscope/internal/units"
	"github.com/allocscope/allocscope/trace"
)

// printSummary writes the short report record prints after converting; quiet writes only its
// warnings (events lost or not recorded), which -q does not silence.
func printSummary(w io.Writer, s intercept.Summary, elapsed time.Duration, output string, quiet bool) {
	if !quiet {
		printCounts(w, s, elapsed)
		printPool(w, s.Pool)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "allocscope: warning: %s\n", warn)
	}
	if s.Lost > 0 {
		fmt.Fprintf(w, "allocscope: warning: %s events were not recorded: the trace lacks them (%s recorded)\n",
			units.FormatCount(s.Lost), units.FormatCount(s.Events))
	}
	if p := s.Pool; p != nil && p.IPCExports > 0 {
		fmt.Fprintf(w, "allocscope: warning: the program exported %s pool block(s) with cudaIpcGetMemHandle; "+
			"a process that opens such a handle sees the pool's region, not the block: record it without --pool\n",
			units.FormatCount(p.IPCExports))
	}
	if !quiet {
		fmt.Fprintf(w, "allocscope: wrote %s\n", output)
	}
}

// printCounts writes the summary's events line and time line.
func printCounts(w io.Writer, s intercept.Summary, elapsed time.Duration) {
	devs := make([]string, len(s.Devices))
	for i, d := range s.Devices {
		devs[i] = fmt.Sprint(d)
	}
	devices := "none"
	if len(devs) > 0 {
		devices = strings.Join(devs, ",")
	}
	fmt.Fprintf(w, "allocscope: %d events from %d process(es), device(s) %s, peak live %s\n",
		s.Events, s.Processes, devices, units.FormatBytesStyle(s.PeakLiveBytes, units.TwoDecimals))
	inCalls := time.Duration(s.AllocCallNs)
	switch {
	case elapsed > 0 && inCalls > elapsed: // threads at once: the sum passes the wall time
		fmt.Fprintf(w, "allocscope: %s inside allocation calls, summed over threads (%.1fx the %s wall time)\n",
			duration(inCalls), inCalls.Seconds()/elapsed.Seconds(), duration(elapsed))
	case elapsed > 0:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls (%.2f%% of %s wall time)\n",
			duration(inCalls), 100*inCalls.Seconds()/elapsed.Seconds(), duration(elapsed))
	default:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls\n", duration(inCalls))
	}
}

// duration writes d as analyze's reports do.
func duration(d time.Duration) string { return units.FormatDuration(float64(d), units.GoRounded) }

// printPool writes what record --pool's pool did, when it was in use.
func printPool(w io.Writer, p *trace.PoolActivity) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "allocscope: pool: peak reserved %s in %s reservation(s), %s fallback(s), %s request(s) passed to CUDA, "+
		"%s synchronization(s) of its own%s (%s)\n", units.FormatBytesStyle(p.PeakReservedBytes, units.TwoDecimals),
		units.FormatCount(p.Reservations), units.FormatCount(p.Fallbacks), units.FormatCount(p.PassedThrough),
		units.FormatCount(p.Syncs), barrierNote(p), duration(time.Duration(p.SyncNs)))
	if p.Events > 0 {
		fmt.Fprintf(w, "allocscope: pool: %s event(s) at stream-ordered frees, %s stream wait(s), %s host wait(s)\n",
			units.FormatCount(p.Events), units.FormatCount(p.StreamWaits), units.FormatCount(p.HostWaits))
	}
	if p.IdleReleases > 0 {
		fmt.Fprintf(w, "allocscope: pool: gave back %s idle region(s) of %s to CUDA when the device was out of memory\n",
			units.FormatCount(p.IdleReleases), units.FormatBytesStyle(p.IdleReleasedBytes, units.TwoDecimals))
	}
}

// barrierNote says how many of the pool's synchronizations were barriers, and why the others were
// not ("" when there were none).
func barrierNote(p *trace.PoolActivity) string {
	if p.Syncs == 0 {
		return ""
	}
	note := fmt.Sprintf(", %s of them barriers on the legacy stream", units.FormatCount(p.Barriers))
	if p.StreamsApart > 0 {
		note += fmt.Sprintf(" (%s non-blocking stream(s) made)", units.FormatCount(p.StreamsApart))
	}
	return note
}
