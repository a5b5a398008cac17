package analysis

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/internal/poolactivity"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/units"
	"github.com/allocscope/allocscope/trace"
)

// Run is what one recording of a program shows for `analyze --compare`: its requests (the rule of
// package requests), the time the program spent inside them, how many calls record --pool's pool
// served, and the recording's span.
type Run struct {
	Name          string `json:"name"`
	Events        uint64 `json:"events"`
	Requests      uint64 `json:"requests"`        // allocations and frees of the request layer
	RequestCallNs int64  `json:"request_call_ns"` // time inside those calls
	AllCallNs     int64  `json:"all_call_ns"`     // time inside every recorded call
	PoolServed    uint64 `json:"pool_served"`     // calls the pool inside the program served
	PeakLiveBytes uint64 `json:"peak_live_bytes"` // of the requests
	WallNs        int64  `json:"wall_ns"`         // from the first call's start to the last call's end
	Layer         string `json:"layer"`           // the request layer
	// Pool is what record --pool's pool did (the trace's metadata); nil for a recording without it.
	Pool *poolactivity.Activity `json:"pool,omitempty"`
}

// Measure reads src to the end and returns its Run. It keeps no events or ops: its memory does not
// grow with the trace.
func Measure(name string, src Source) (Run, error) {
	t := &tally{src: src}
	st, err := requests.Count(t)
	if err != nil {
		return Run{}, fmt.Errorf("%s: %w", name, err)
	}
	r := t.run
	r.Name, r.Layer = name, string(st.Layer)
	r.Requests = st.Allocs + st.Frees
	r.RequestCallNs = st.RecordedCallNs
	r.PeakLiveBytes = st.PeakLiveBytes
	if t.seen {
		r.WallNs = t.last - t.first
	}
	return r, nil
}

// tally is a Source that counts what Measure needs beside the request stream.
type tally struct {
	src         Source
	run         Run
	first, last int64
	seen        bool
}

func (t *tally) Next() ([]trace.Event, error) {
	b, err := t.src.Next()
	for i := range b {
		e := &b[i]
		t.run.Events++
		t.run.AllCallNs += max(e.DurationNs, 0)
		if e.Pool {
			t.run.PoolServed++
		}
		if !t.seen || e.TimeNs < t.first {
			t.first = e.TimeNs
		}
		t.last = max(t.last, e.TimeNs+max(e.DurationNs, 0))
		t.seen = true
	}
	return b, err
}

// WriteComparison writes two runs of a program side by side: before, after and the ratio.
func WriteComparison(w io.Writer, before, after Run) error {
	ratio := func(a, b int64) string {
		switch {
		case a <= 0 || b <= 0:
			return ""
		case a >= b:
			return fmt.Sprintf("%.1fx less", float64(a)/float64(b))
		}
		return fmt.Sprintf("%.1fx more", float64(b)/float64(a))
	}
	perRequest := func(r Run) string {
		if r.Requests == 0 {
			return "-"
		}
		return dur(r.RequestCallNs / int64(r.Requests))
	}
	if _, err := fmt.Fprintf(w, "before: %s\nafter:  %s\n\n", before.Name, after.Name); err != nil {
		return err
	}
	rows := [][4]string{
		{"", "before", "after", ""},
		{"events", units.FormatCount(int64(before.Events)), units.FormatCount(int64(after.Events)), ""},
		{"requests (" + after.Layer + ")", units.FormatCount(int64(before.Requests)), units.FormatCount(int64(after.Requests)), ""},
		{"served by the pool", units.FormatCount(int64(before.PoolServed)), units.FormatCount(int64(after.PoolServed)), ""},
		{"time inside the requests", dur(before.RequestCallNs), dur(after.RequestCallNs), ratio(before.RequestCallNs, after.RequestCallNs)},
		{"  per request", perRequest(before), perRequest(after), ""},
		{"time inside all calls", dur(before.AllCallNs), dur(after.AllCallNs), ratio(before.AllCallNs, after.AllCallNs)},
		{"wall time, first to last call", dur(before.WallNs), dur(after.WallNs), ratio(before.WallNs, after.WallNs)},
		{"peak live", units.FormatBytes(before.PeakLiveBytes), units.FormatBytes(after.PeakLiveBytes), ""},
	}
	if before.Pool != nil || after.Pool != nil {
		rows = append(rows, poolRows(before.Pool, after.Pool)...)
	}
	for _, r := range rows {
		line := strings.TrimRight(fmt.Sprintf("%-30s %-22s %-22s %s", r[0], r[1], r[2], r[3]), " ")
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// poolRows are the comparison's lines on what record --pool's pool did ("-": no pool).
func poolRows(before, after *poolactivity.Activity) [][4]string {
	field := func(p *poolactivity.Activity, f func(*poolactivity.Activity) string) string {
		if p == nil {
			return "-"
		}
		return f(p)
	}
	row := func(name string, f func(*poolactivity.Activity) string) [4]string {
		return [4]string{name, field(before, f), field(after, f), ""}
	}
	count := func(get func(*poolactivity.Activity) int64) func(*poolactivity.Activity) string {
		return func(p *poolactivity.Activity) string { return units.FormatCount(get(p)) }
	}
	peak := row("pool: peak reserved", func(p *poolactivity.Activity) string { return units.FormatBytes(p.PeakReservedBytes) })
	several := func(p *poolactivity.Activity) bool { return p != nil && p.PeakReservedTotal() > p.PeakReservedBytes }
	if several(before) || several(after) { // several pools: each one's peak, summed, then the largest
		peak = row("pool: peak reserved, summed", func(p *poolactivity.Activity) string { return units.FormatBytes(p.PeakReservedTotal()) })
	}
	rows := [][4]string{
		peak,
		row("pool: reservations", count(func(p *poolactivity.Activity) int64 { return p.Reservations })),
		row("pool: fallbacks (growths)", count(func(p *poolactivity.Activity) int64 { return p.Fallbacks })),
		row("pool: requests passed to CUDA", count(func(p *poolactivity.Activity) int64 { return p.PassedThrough })),
		row("pool: its own synchronizations", func(p *poolactivity.Activity) string {
			return fmt.Sprintf("%s (%s)", units.FormatCount(p.Syncs), dur(p.SyncNs))
		}),
		row("pool: of them barriers", count(func(p *poolactivity.Activity) int64 { return p.Barriers })),
		row("pool: stream / host waits", func(p *poolactivity.Activity) string {
			return fmt.Sprintf("%s / %s", units.FormatCount(p.StreamWaits), units.FormatCount(p.HostWaits))
		}),
	}
	if several(before) || several(after) {
		rows = slices.Insert(rows, 1, row("pool: largest pool's peak", func(p *poolactivity.Activity) string {
			return units.FormatBytes(p.PeakReservedBytes)
		}))
	}
	if (before != nil && before.IPCExports > 0) || (after != nil && after.IPCExports > 0) {
		rows = append(rows, row("pool: blocks exported by IPC", count(func(p *poolactivity.Activity) int64 { return p.IPCExports })))
	}
	return rows
}

// dur writes ns as every report does (units.FormatDuration).
func dur(ns int64) string { return units.FormatDuration(float64(ns)) }
