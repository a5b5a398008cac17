package record

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/poolactivity"
	"github.com/allocscope/allocscope/internal/units"
)

// printSummary writes the short report record prints after converting; quiet writes only its
// warnings (events lost or not recorded), which -q does not silence.
func printSummary(w io.Writer, s intercept.Summary, elapsed time.Duration, output string, quiet bool) {
	if !quiet {
		printCounts(w, s, elapsed)
		if s.Extra > 0 {
			fmt.Fprintf(w, "allocscope: %s of the events are the frameworks' own allocator requests (PyTorch, CuPy)\n",
				units.FormatCount(s.Extra))
		}
		printPool(w, s.Pool)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "allocscope: warning: %s\n", warn)
	}
	if s.Lost > 0 {
		fmt.Fprintf(w, "allocscope: warning: %s events were not recorded: the trace lacks them (%s recorded)\n",
			units.FormatCount(s.Lost), units.FormatCount(s.Events))
	}
	printPassed(w, s.Pool, s.PoolServed)
	if p := s.Pool; p != nil && p.IPCExports > 0 {
		fmt.Fprintf(w, "allocscope: warning: the program asked for IPC handles of %s pool block(s) "+
			"(cudaIpcGetMemHandle); they were refused with an invalid-value error: record it without --pool\n",
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
	fmt.Fprintf(w, "allocscope: %s events from %d process(es), device(s) %s, peak live %s\n",
		units.FormatCount(s.Events), s.Processes, devices, units.FormatBytes(s.PeakLiveBytes))
	inCalls := time.Duration(s.AllocCallNs)
	switch {
	case elapsed > 0 && inCalls > elapsed: // threads at once: the sum passes the wall time
		fmt.Fprintf(w, "allocscope: %s inside allocation calls, summed over threads (%sx the %s wall time)\n",
			duration(inCalls), units.FormatRatio(inCalls.Seconds()/elapsed.Seconds()), duration(elapsed))
	case elapsed > 0:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls (%s of %s wall time)\n",
			duration(inCalls), units.FormatPercent(100*inCalls.Seconds()/elapsed.Seconds()), duration(elapsed))
	default:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls\n", duration(inCalls))
	}
}

// duration writes d as every report does (units.FormatDuration).
func duration(d time.Duration) string { return units.FormatDuration(float64(d)) }

// printPool writes what record --pool's pool did, when it was in use.
func printPool(w io.Writer, p *poolactivity.Activity) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "allocscope: pool: peak reserved %s in %s reservation(s), %s fallback(s), %s request(s) passed to CUDA, "+
		"%s synchronization(s) of its own%s (%s)\n", peakReserved(p),
		units.FormatCount(p.Reservations), units.FormatCount(p.Fallbacks), units.FormatCount(p.PassedThrough),
		units.FormatCount(p.Syncs), barrierNote(p), duration(time.Duration(p.SyncNs)))
	if p.Events > 0 {
		fmt.Fprintf(w, "allocscope: pool: %s event(s) at stream-ordered frees, %s stream wait(s), %s host wait(s)\n",
			units.FormatCount(p.Events), units.FormatCount(p.StreamWaits), units.FormatCount(p.HostWaits))
	}
	if p.IdleReleases > 0 {
		fmt.Fprintf(w, "allocscope: pool: gave back %s idle region(s) of %s to CUDA when the device was out of memory\n",
			units.FormatCount(p.IdleReleases), units.FormatBytes(p.IdleReleasedBytes))
	}
}

// barrierNote says how many of the pool's synchronizations were barriers, and why the others were
// not ("" when there were none).
func barrierNote(p *poolactivity.Activity) string {
	if p.Syncs == 0 {
		return ""
	}
	note := fmt.Sprintf(", %s of them barriers on the legacy stream", units.FormatCount(p.Barriers))
	if p.StreamsApart > 0 {
		note += fmt.Sprintf(" (%s non-blocking stream(s) made)", units.FormatCount(p.StreamsApart))
	}
	return note
}

// peakReserved writes the pools' peak reserved bytes: the sum over processes (and devices) of each
// pool's own peak, labelled so where there were several pools (an upper bound of the peak of their
// sum: they need not peak at once), with the largest single pool's.
func peakReserved(p *poolactivity.Activity) string {
	sum := units.FormatBytes(p.PeakReservedSumBytes)
	largest := units.FormatBytes(p.PeakReservedBytes)
	if p.PeakReservedSumBytes <= p.PeakReservedBytes { // one pool, or a recorder without the sum
		return largest
	}
	return fmt.Sprintf("%s summed over the pools of every process (each pool's own peak; the largest pool %s)", sum, largest)
}

// printPassed writes, whenever record --pool sent requests of the kinds it serves to CUDA, one line
// saying how many and why, and one naming the first error when a pool could not be made.
func printPassed(w io.Writer, p *poolactivity.Activity, served int64) {
	if p == nil || p.PassedThrough == 0 {
		return
	}
	fmt.Fprintf(w, "allocscope: record --pool served %s of %s allocations; %s went to CUDA: %s\n",
		units.FormatCount(served), units.FormatCount(served+p.PassedThrough), units.FormatCount(p.PassedThrough),
		passReasons(p))
	if p.PoolsNotMade > 0 {
		fmt.Fprintf(w, "allocscope: record --pool could not make %s pool(s): %s\n", units.FormatCount(p.PoolsNotMade),
			notMadeCause(p.FirstNotMadeError))
	}
}

// passReasons lists PassedBy's counts, the largest first (ties in poolactivity.PassReasons' order), e.g.
// "12 capture, 7 no_context"; "reasons not recorded" for a trace of a recorder that kept none.
func passReasons(p *poolactivity.Activity) string {
	reasons := slices.Clone(poolactivity.PassReasons)
	reasons = slices.DeleteFunc(reasons, func(r string) bool { return p.PassedBy[r] == 0 })
	slices.SortStableFunc(reasons, func(a, b string) int { return cmp.Compare(p.PassedBy[b], p.PassedBy[a]) })
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = units.FormatCount(p.PassedBy[r]) + " " + r
	}
	if len(parts) == 0 {
		return "reasons not recorded"
	}
	return strings.Join(parts, ", ")
}

// cudaErrorNames names the CUDA errors a reservation of a pool's plan (cuMemAlloc_v2) returns.
var cudaErrorNames = map[int64]string{1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE", 201: "CUDA_ERROR_INVALID_CONTEXT", 999: "CUDA_ERROR_UNKNOWN"}

// notMadeCause says why the first pool could not be made, from the CUDA error of its reservation.
func notMadeCause(code int64) string {
	if code == 0 {
		return "the driver lacks functions the pool needs, or the plan could not be laid out; its allocations went to CUDA"
	}
	name := cudaErrorNames[code]
	if name == "" {
		name = "CUDA error"
	}
	return fmt.Sprintf("the first reservation of the plan failed with %s (%d); its allocations went to CUDA", name, code)
}
