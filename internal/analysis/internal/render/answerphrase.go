package render

import (
	"fmt"
	"html"

	"github.com/allocscope/allocscope/internal/analysis/internal/model"
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
func (p phraser) today(now model.Today) string {
	s := now.Allocator
	if now.Settings != "" {
		s += " (" + now.Settings + ")"
	}
	from := map[string]string{model.ReservedFromTrace: "the trace's device memory", model.ReservedFromModel: "its model"}[now.ReservedFrom]
	if from == "" {
		return p.esc(s + ", peak reserved n/a")
	}
	return p.esc(s) + p.line(", peak reserved %s ("+from+")",
		p.fig("answer.today.peak_reserved_bytes", now.PeakReservedBytes, Bytes(now.PeakReservedBytes)))
}

// callTime is the time inside allocation calls and its share of the wall time.
func (p phraser) callTime(a *model.Answer) string {
	if !a.CallTimeKnown {
		return p.esc("n/a (the trace has no call durations)")
	}
	return p.line("%s inside allocation calls, %s of %s wall time",
		p.fig("answer.call_ns", a.CallNs, Duration(float64(a.CallNs))),
		p.fig("answer.call_percent", a.CallPercent, Percent(a.CallPercent)),
		p.fig("answer.wall_ns", a.WallNs, Duration(float64(a.WallNs))))
}

// unknownSaving is why a saving cannot be given for a's recommendation, or "".
func unknownSaving(a *model.Answer) string {
	switch a.Recommendation.Kind {
	case model.AdviceNoneFits:
		return "n/a (nothing fits)"
	case model.AdviceRecordRequests:
		return "n/a (the program's requests are not in the trace)"
	}
	return ""
}

// memorySaving says what the recommendation saves or costs in peak reserved bytes.
func (p phraser) memorySaving(a *model.Answer) string {
	s := a.Savings
	if why := unknownSaving(a); why != "" {
		return p.esc(why)
	}
	if !s.MemoryKnown {
		return p.esc("n/a")
	}
	verb, n := "saves %s", s.MemoryBytes
	if n < 0 {
		verb, n = "costs %s more", -n
	} else if n == 0 {
		return p.esc("the same peak reserved as today")
	}
	return p.line(verb+" (%s of today's %s)", p.fig("answer.savings.memory_bytes", s.MemoryBytes, Bytes(uint64(n))),
		p.fig("answer.savings.memory_percent", s.MemoryPercent, Percent(max(s.MemoryPercent, -s.MemoryPercent))),
		p.fig("answer.today.peak_reserved_bytes", a.Today.PeakReservedBytes, Bytes(a.Today.PeakReservedBytes)))
}

// timeSaving says what the recommendation saves or costs in time inside allocation calls.
func (p phraser) timeSaving(a *model.Answer) string {
	s := a.Savings
	switch why := unknownSaving(a); {
	case why != "":
		return p.esc(why)
	case !s.TimeKnown && !a.CallTimeKnown:
		return p.esc("n/a (the trace has no call durations)")
	case !s.TimeKnown:
		return p.esc("n/a (the model times only allocscope's pool)")
	}
	verb, n := "saves %s", s.TimeNs
	if n < 0 {
		verb, n = "costs %s more", -n
	} else if n == 0 {
		return p.esc("the same time as today")
	}
	return p.line(verb+" (%s of the %s in allocation calls)", p.fig("answer.savings.time_ns", s.TimeNs, Duration(float64(n))),
		p.fig("answer.savings.time_percent", s.TimePercent, Percent(max(s.TimePercent, -s.TimePercent))),
		p.fig("answer.call_ns", a.CallNs, Duration(float64(a.CallNs))))
}
