package render

import (
	"fmt"
	"strings"

	"github.com/allocscope/allocscope/analysis/internal/model"
)

// answerLabel is the width of the labels of the ANSWER section; its values start after it.
const answerLabel = 18

// answer writes the report's first screen: what the program does with memory, the
// recommendation and what it saves against today, the anomalies that need action.
func (t *textWriter) answer(a *model.Answer) {
	if a == nil {
		return
	}
	t.printf("\nANSWER\n")
	t.answerLine("peak live", Bytes(a.PeakLiveBytes))
	t.answerLine("allocator today", todayLine(a.Today))
	calls := "n/a (the trace has no call durations)"
	if a.CallTimeKnown {
		calls = fmt.Sprintf("%s inside allocation calls, %s of %s wall time", Duration(float64(a.CallNs)),
			Percent(a.CallPercent), Duration(float64(a.WallNs)))
	}
	t.answerLine("time in calls", calls)
	t.answerLine("recommendation", a.Recommendation.Summary)
	if a.Recommendation.Kind == model.AdviceRecordRequests {
		t.answerLine("", a.Recommendation.Setting)
	}
	t.answerLine("memory vs today", memorySaving(a))
	t.answerLine("time vs today", timeSaving(a))
	if len(a.Actions) == 0 {
		t.answerLine("needs action", "nothing: no leaks, failed allocations, out-of-memory or bad frees")
	}
	for i, act := range a.Actions {
		label := ""
		if i == 0 {
			label = "needs action"
		}
		t.answerLine(label, act.Summary)
	}
}

// answerLine writes one labelled line of the ANSWER section, its value wrapped to 100 columns.
func (t *textWriter) answerLine(label, value string) {
	indent := strings.Repeat(" ", answerLabel+3)
	t.printf("  %-*s %s\n", answerLabel, label, wrapFrom(value, 100, indent, len(indent)))
}

// todayLine describes the allocator the program uses now and what it reserved.
func todayLine(now model.Today) string {
	s := now.Allocator
	if now.Settings != "" {
		s += " (" + now.Settings + ")"
	}
	switch now.ReservedFrom {
	case model.ReservedFromTrace:
		return s + ", peak reserved " + Bytes(now.PeakReservedBytes) + " (the trace's device memory)"
	case model.ReservedFromModel:
		return s + ", peak reserved " + Bytes(now.PeakReservedBytes) + " (its model)"
	}
	return s + ", peak reserved n/a"
}

// memorySaving says what the recommendation saves or costs in peak reserved bytes.
func memorySaving(a *model.Answer) string {
	s := a.Savings
	switch {
	case a.Recommendation.Kind == model.AdviceNoneFits:
		return "n/a (nothing fits)"
	case a.Recommendation.Kind == model.AdviceRecordRequests:
		return "n/a (the program's requests are not in the trace)"
	case !s.MemoryKnown:
		return "n/a"
	}
	of := fmt.Sprintf(" of today's %s", Bytes(a.Today.PeakReservedBytes))
	switch {
	case s.MemoryBytes > 0:
		return fmt.Sprintf("saves %s (%s%s)", Bytes(uint64(s.MemoryBytes)), Percent(s.MemoryPercent), of)
	case s.MemoryBytes < 0:
		return fmt.Sprintf("costs %s more (%s%s)", Bytes(uint64(-s.MemoryBytes)), Percent(-s.MemoryPercent), of)
	}
	return "the same peak reserved as today"
}

// timeSaving says what the recommendation saves or costs in time inside allocation calls.
func timeSaving(a *model.Answer) string {
	s := a.Savings
	switch {
	case a.Recommendation.Kind == model.AdviceNoneFits:
		return "n/a (nothing fits)"
	case a.Recommendation.Kind == model.AdviceRecordRequests:
		return "n/a (the program's requests are not in the trace)"
	case !s.TimeKnown && !a.CallTimeKnown:
		return "n/a (the trace has no call durations)"
	case !s.TimeKnown:
		return "n/a (the model times only allocscope's pool)"
	}
	of := fmt.Sprintf(" of the %s in allocation calls", Duration(float64(a.CallNs)))
	switch {
	case s.TimeNs > 0:
		return fmt.Sprintf("saves %s (%s%s)", Duration(float64(s.TimeNs)), Percent(s.TimePercent), of)
	case s.TimeNs < 0:
		return fmt.Sprintf("costs %s more (%s%s)", Duration(float64(-s.TimeNs)), Percent(-s.TimePercent), of)
	}
	return "the same time as today"
}
