package render

import (
	"html/template"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// answerView is the first block of a section: the report's schema.Answer as the page shows it,
// the recommendation in the user's terms on top, then a row per figure and the anomalies that
// need action. Its numbers are figures (see figure).
type answerView struct {
	Recommendation string // Advice.Summary
	Setting        string // Advice.Setting, what to set or run
	Rows           []answerRow
	Actions        []string // Action.Summary, most serious first
}

// answerRow is one line of the answer: what it is and its value.
type answerRow struct {
	Label string
	Value template.HTML
}

// answerOf lays out a; nil without an answer.
func answerOf(a *schema.Answer) *answerView {
	if a == nil {
		return nil
	}
	v := &answerView{Recommendation: a.Recommendation.Summary, Setting: a.Recommendation.Setting}
	if p := a.Recommendation.PeakReservedBytes; p > 0 {
		v.Rows = append(v.Rows, answerRow{"recommended: predicted peak reserved",
			figure("answer.recommendation.peak_reserved_bytes", p, Bytes(p))})
	}
	v.Rows = append(v.Rows, answerRow{"allocator today", htmlPhrase(htmlPhraser.today(a.Today))},
		answerRow{"saving in memory", htmlPhrase(htmlPhraser.memorySaving(a))},
		answerRow{"saving in time", htmlPhrase(htmlPhraser.timeSaving(a))},
		answerRow{"peak live", figure("answer.peak_live_bytes", a.PeakLiveBytes, Bytes(a.PeakLiveBytes))},
		answerRow{"time in allocation calls", htmlPhrase(htmlPhraser.callTime(a))})
	for _, act := range a.Actions {
		v.Actions = append(v.Actions, act.Summary)
	}
	return v
}

// htmlPhrase is a sentence of htmlPhraser: escaped text of ours and figures.
func htmlPhrase(s string) template.HTML { return template.HTML(s) } // #nosec G203 -- escaped by htmlPhraser

// anomalyRow is one event of an anomaly in the page's table: its kind and the event.
type anomalyRow struct {
	Kind string
	schema.EventRef
}

// anomalyView is the page's table of anomalies: a line per kind with its count and bytes, and
// their first events with their callsites.
type anomalyView struct {
	Kinds []anomalyKind
	Rows  []anomalyRow
}

// anomalyKind is one kind of anomaly and how often it happened.
type anomalyKind struct {
	Name         string
	Count, Bytes uint64
}

// anomalies lays out a: every kind that happened (leaks first), and the memory a framework's
// allocator held until exit apart from the leaks.
func anomalies(a *schema.Anomalies) anomalyView {
	var v anomalyView
	for _, k := range []struct {
		name string
		a    schema.Anomaly
	}{{"leak (never freed)", a.Leaks}, {"double free", a.DoubleFrees}, {"free of an unknown address", a.UnknownFrees},
		{"failed allocation", a.FailedAllocs}, {"zero-size request", a.ZeroSize}} {
		if k.a.Count == 0 {
			continue
		}
		v.Kinds = append(v.Kinds, anomalyKind{k.name, k.a.Count, k.a.Bytes})
		for _, e := range k.a.Events {
			v.Rows = append(v.Rows, anomalyRow{k.name, e})
		}
	}
	if h := a.HeldByAllocator; h != nil {
		name := "held by " + h.Framework + "'s allocator until exit (not a leak)"
		v.Kinds = append(v.Kinds, anomalyKind{name, h.Count, h.Bytes})
		for _, e := range h.Events {
			v.Rows = append(v.Rows, anomalyRow{name, e})
		}
	}
	return v
}

// usedStacks are the stacks of the callsites the page names, by name.
func usedStacks(tr *schema.TraceReport, data *chartData) map[string][]string {
	if len(tr.Stacks) == 0 {
		return nil
	}
	used := map[string][]string{}
	add := func(names ...string) {
		for _, n := range names {
			if s, ok := tr.Stacks[n]; ok {
				used[n] = s
			}
		}
	}
	for _, c := range append(tr.TopCallsites, tr.PeakCallsites...) {
		add(c.Callsite)
	}
	for _, e := range anomalies(&tr.Anomalies).Rows {
		add(e.Callsite)
	}
	add(data.Timeline.Sites...)
	for _, m := range data.Maps {
		add(m.Sites...)
	}
	if o := tr.OOM; o != nil {
		for _, f := range o.Fragmented {
			for _, p := range f.PinnedBy {
				add(p.Callsite)
			}
		}
	}
	return used
}

// joinLines is a tooltip's lines as one title attribute.
func joinLines(lines []string) string { return strings.Join(lines, "\n") }
