package record

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/allocscope/allocscope/intercept"
)

// printSummary writes the short report record prints after converting; quiet writes only its
// warnings (events lost or not recorded), which -q does not silence.
func printSummary(w io.Writer, s intercept.Summary, elapsed time.Duration, output string, quiet bool) {
	if !quiet {
		printCounts(w, s, elapsed)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "allocscope: warning: %s\n", warn)
	}
	if s.Lost > 0 {
		fmt.Fprintf(w, "allocscope: warning: %s events were not recorded: the trace lacks them (%s recorded)\n",
			groupDigits(s.Lost), groupDigits(s.Events))
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
		s.Events, s.Processes, devices, formatBytes(s.PeakLiveBytes))
	inCalls := time.Duration(s.AllocCallNs)
	switch {
	case elapsed > 0 && inCalls > elapsed: // threads at once: the sum passes the wall time
		fmt.Fprintf(w, "allocscope: %s inside allocation calls, summed over threads (%.1fx the %s wall time)\n",
			inCalls.Round(time.Millisecond), inCalls.Seconds()/elapsed.Seconds(), elapsed.Round(time.Millisecond))
	case elapsed > 0:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls (%.2f%% of %s wall time)\n",
			inCalls.Round(time.Microsecond), 100*inCalls.Seconds()/elapsed.Seconds(), elapsed.Round(time.Millisecond))
	default:
		fmt.Fprintf(w, "allocscope: %s inside allocation calls\n", inCalls.Round(time.Microsecond))
	}
}

// formatBytes prints n with a binary unit.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// groupDigits prints n with thousands separators: 930,367.
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + groupDigits(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
