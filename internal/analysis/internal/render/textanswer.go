package render

import (
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// answerLabel is the width of the labels of the ANSWER section; its values start after it.
const answerLabel = 18

// answer writes the report's first screen: what the program does with memory, the
// recommendation and what it saves against today, the anomalies that need action.
func (t *textWriter) answer(a *schema.Answer) {
	if a == nil {
		return
	}
	t.printf("\nANSWER\n")
	t.answerLine("peak live", Bytes(a.PeakLiveBytes))
	t.answerLine("allocator today", textPhraser.today(a.Today))
	t.answerLine("time in calls", textPhraser.callTime(a))
	t.answerLine("recommendation", a.Recommendation.Summary)
	if a.Recommendation.Kind == schema.AdviceRecordRequests {
		t.answerLine("", a.Recommendation.Setting)
	}
	t.answerLine("memory vs today", textPhraser.memorySaving(a))
	t.answerLine("time vs today", textPhraser.timeSaving(a))
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
