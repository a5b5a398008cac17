package render

import (
	"fmt"
	"html"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// phraser writes the answer's sentences for one report: the text report shows them as they are,
// the HTML report marks each number up as a figure (its JSON path and value, which its tests
// compare with the JSON report) and escapes the rest. The sentences exist once, here.
type phraser struct {
	fig func(path string, v any, shown string) string // one number of the answer
	esc func(string) string                           // text of ours around the numbers
}

var (
	textPhraser = phraser{fig: func(_ string, _ any, shown string) string { return shown },
		esc: func(s string) string { return s }}
	htmlPhraser = phraser{fig: func(path string, v any, shown string) string { return string(figure(path, v, shown)) },
		esc: html.EscapeString}
)

// line fills format, text of ours, with numbers already written by p.fig.
func (p phraser) line(format string, figs ...any) string { return fmt.Sprintf(p.esc(format), figs...) }

// today describes the allocator the program uses now and what it reserved.
func (p phraser) today(now schema.Today) string {
	s := now.Allocator
	if now.Settings != "" {
		s += " (" + now.Settings + ")"
	}
	from := map[string]string{schema.ReservedFromTrace: "the trace's device memory", schema.ReservedFromModel: "its model"}[now.ReservedFrom]
	if from == "" {
		return p.esc(s + ", peak reserved n/a")
	}
	return p.esc(s) + p.line(", peak reserved %s ("+from+")",
		p.fig("answer.today.peak_reserved_bytes", now.PeakReservedBytes, Bytes(now.PeakReservedBytes)))
}

// callTime is the time inside allocation calls and its share of the wall time.
func (p phraser) callTime(a *schema.Answer) string {
	if !a.CallTimeKnown {
		return p.esc("n/a (the trace has no call durations)")
	}
	return p.line("%s inside allocation calls, %s of %s wall time",
		p.fig("answer.call_ns", a.CallNs, Duration(float64(a.CallNs))),
		p.fig("answer.call_percent", a.CallPercent, Percent(a.CallPercent)),
		p.fig("answer.wall_ns", a.WallNs, Duration(float64(a.WallNs))))
}

// unknownSaving is why a saving cannot be given for a's recommendation, or "".
func unknownSaving(a *schema.Answer) string {
	switch a.Recommendation.Kind {
	case schema.AdviceNoneFits:
		return "n/a (nothing fits)"
	case schema.AdviceRecordRequests:
		return "n/a (the program's requests are not in the trace)"
	}
	return ""
}

// saving is one saving of the answer: what it measures, its JSON paths, how its numbers read.
type saving struct {
	amount, percent, of string  // JSON paths: the saving, its share, what it is a share of
	n                   int64   // the saving (negative: a cost)
	pct                 float64 // its share, %
	total               uint64  // what it is a share of
	format              func(uint64) string
	same, ofWhat        string // the sentence for no change; how the share's whole reads ("today's %s")
}

// phrase says a saving: "saves X (P of W)", "costs X more (P of W)", or that nothing changes.
func (p phraser) phrase(s saving) string {
	verb, n := "saves %s", s.n
	if n < 0 {
		verb, n = "costs %s more", -n
	} else if n == 0 {
		return p.esc(s.same)
	}
	return p.line(verb+" (%s of "+s.ofWhat+")", p.fig(s.amount, s.n, s.format(uint64(n))),
		p.fig(s.percent, s.pct, Percent(max(s.pct, -s.pct))), p.fig(s.of, s.total, s.format(s.total)))
}

// memorySaving says what the recommendation saves or costs in peak reserved bytes.
func (p phraser) memorySaving(a *schema.Answer) string {
	s := a.Savings
	if why := unknownSaving(a); why != "" {
		return p.esc(why)
	}
	if !s.MemoryKnown {
		return p.esc("n/a")
	}
	return p.phrase(saving{amount: "answer.savings.memory_bytes", percent: "answer.savings.memory_percent",
		of: "answer.today.peak_reserved_bytes", n: s.MemoryBytes, pct: s.MemoryPercent, total: a.Today.PeakReservedBytes,
		format: Bytes, same: "the same peak reserved as today", ofWhat: "today's %s"})
}

// timeSaving says what the recommendation saves or costs in time inside allocation calls.
func (p phraser) timeSaving(a *schema.Answer) string {
	s := a.Savings
	switch why := unknownSaving(a); {
	case why != "":
		return p.esc(why)
	case !s.TimeKnown && !a.CallTimeKnown:
		return p.esc("n/a (the trace has no call durations)")
	case !s.TimeKnown:
		return p.esc("n/a (the model times only allocscope's pool)")
	}
	return p.phrase(saving{amount: "answer.savings.time_ns", percent: "answer.savings.time_percent",
		of: "answer.call_ns", n: s.TimeNs, pct: s.TimePercent, total: uint64(max(a.CallNs, 0)),
		format: func(ns uint64) string { return Duration(float64(ns)) }, same: "the same time as today",
		ofWhat: "the %s in allocation calls"})
}
