package record

import (
	"strings"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/poolactivity"
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
			"allocscope: 1,787 events from 1 process(es), device(s) 0, peak live 3 MiB\n" +
				"allocscope: 34.5 ms inside allocation calls (0.332% of 10.4 s wall time)\n" +
				"allocscope: wrote t.arrow\n"},
		{intercept.Summary{Events: 1280001, Processes: 1, Devices: []int32{0}, AllocCallNs: int64(224556 * time.Millisecond)},
			7579 * time.Millisecond, false,
			"allocscope: 1,280,001 events from 1 process(es), device(s) 0, peak live 0 B\n" +
				"allocscope: 225 s inside allocation calls, summed over threads (29.6x the 7.58 s wall time)\n" +
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

// record --pool's line about requests that went to CUDA: counts with thousands separators, the
// reasons largest first (ties in poolactivity.PassReasons' order), also with -q; a second line for pools
// not made, naming the first error; the pools' peak reserved summed over processes when there were
// several pools.
func TestPrintSummaryPool(t *testing.T) {
	pool := &poolactivity.Activity{Reservations: 2, PassedThrough: 19, PeakReservedBytes: 1 << 20, PeakReservedSumBytes: 3 << 20,
		PassedBy: map[string]int64{"no_context": 7, "capture": 12}}
	var b strings.Builder
	printSummary(&b, intercept.Summary{Events: 4000, Processes: 2, Devices: []int32{0}, Pool: pool, PoolServed: 1981},
		0, "t.arrow", false)
	want := "allocscope: 4,000 events from 2 process(es), device(s) 0, peak live 0 B\n" +
		"allocscope: 0 ns inside allocation calls\n" +
		"allocscope: pool: peak reserved 3 MiB summed over the pools of every process (each pool's own peak; " +
		"the largest pool 1 MiB) in 2 reservation(s), 0 fallback(s), 19 request(s) passed to CUDA, 0 synchronization(s) of its own (0 ns)\n" +
		"allocscope: record --pool served 1,981 of 2,000 allocations; 19 went to CUDA: 12 capture, 7 no_context\n" +
		"allocscope: wrote t.arrow\n"
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	notMade := &poolactivity.Activity{PassedThrough: 4, PoolsNotMade: 2, PassedBy: map[string]int64{"no_pool": 2, "full": 2}}
	b.Reset()
	printSummary(&b, intercept.Summary{Pool: notMade}, 0, "t.arrow", true)
	want = "allocscope: record --pool served 0 of 4 allocations; 4 went to CUDA: 2 no_pool, 2 full\n" +
		"allocscope: record --pool could not make 2 pool(s): the driver lacks functions the pool needs, or the plan " +
		"could not be laid out; its allocations went to CUDA\n"
	if b.String() != want {
		t.Errorf("quiet summary:\n%s\nwant:\n%s", b.String(), want)
	}
}
