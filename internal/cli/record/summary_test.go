package record

import (
	"strings"
	"testing"
	"time"

	"github.com/allocscope/allocscope/intercept"
)

// The summary's lines: time in calls as a share of the wall time, or summed over threads when the
// sum passes it; lost events in one line with their count, also with -q.
func TestPrintSummary(t *testing.T) {
	cases := []struct {
		sum     intercept.Summary
		elapsed time.Duration
		quiet   bool
		want    string
	}{
		{intercept.Summary{Events: 1787, Processes: 1, Devices: []int32{0}, PeakLiveBytes: 3 << 20, AllocCallNs: 34_496_000},
			10392 * time.Millisecond, false,
			"allocscope: 1787 events from 1 process(es), device(s) 0, peak live 3.00 MiB\n" +
				"allocscope: 34.5ms inside allocation calls (0.33% of 10.39s wall time)\n" +
				"allocscope: wrote t.arrow\n"},
		{intercept.Summary{Events: 1280001, Processes: 1, Devices: []int32{0}, AllocCallNs: int64(224556 * time.Millisecond)},
			7579 * time.Millisecond, false,
			"allocscope: 1280001 events from 1 process(es), device(s) 0, peak live 0 B\n" +
				"allocscope: 3m44.56s inside allocation calls, summed over threads (29.6x the 7.58s wall time)\n" +
				"allocscope: wrote t.arrow\n"},
		{intercept.Summary{Events: 69633, Lost: 930367, Warnings: []string{"process 7 (loop) stopped recording"}},
			time.Second, true,
			"allocscope: warning: process 7 (loop) stopped recording\n" +
				"allocscope: warning: 930,367 events were not recorded: the trace lacks them (69,633 recorded)\n"},
	}
	for _, c := range cases {
		var b strings.Builder
		printSummary(&b, c.sum, c.elapsed, "t.arrow", c.quiet)
		if b.String() != c.want {
			t.Errorf("summary:\n%s\nwant:\n%s", b.String(), c.want)
		}
	}
}
