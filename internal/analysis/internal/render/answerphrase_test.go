package render

import (
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// The answer's sentences are written once: the text report shows them as they are, the HTML report
// the same words with each number marked up as a figure of the JSON report and the rest escaped.
func TestAnswerPhrases(t *testing.T) {
	a := &schema.Answer{CallTimeKnown: true, CallNs: 34_500_000, CallPercent: 0.735, WallNs: 4_690_000_000,
		Today:          schema.Today{Allocator: "raw cudaMalloc", ReservedFrom: schema.ReservedFromTrace, PeakReservedBytes: 224 << 20},
		Recommendation: schema.Advice{Kind: schema.AdvicePool},
		Savings:        schema.Savings{MemoryKnown: true, MemoryBytes: -(9 << 19), MemoryPercent: -2.01, TimeKnown: true, TimeNs: 34_400_000, TimePercent: 99.7}}
	for _, c := range []struct{ got, want string }{
		{textPhraser.memorySaving(a), "costs 4.5 MiB more (2.01% of today's 224 MiB)"},
		{textPhraser.timeSaving(a), "saves 34.4 ms (99.7% of the 34.5 ms in allocation calls)"},
		{textPhraser.today(a.Today), "raw cudaMalloc, peak reserved 224 MiB (the trace's device memory)"},
		{textPhraser.callTime(a), "34.5 ms inside allocation calls, 0.735% of 4.69 s wall time"},
		{htmlPhraser.memorySaving(a), `costs <b class="fig" data-json="answer.savings.memory_bytes" data-v="-4718592">4.5 MiB</b> more (` +
			`<b class="fig" data-json="answer.savings.memory_percent" data-v="-2.01">2.01%</b> of today&#39;s ` +
			`<b class="fig" data-json="answer.today.peak_reserved_bytes" data-v="234881024">224 MiB</b>)`},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
	a.Recommendation.Kind = schema.AdviceNoneFits
	if got := htmlPhraser.memorySaving(a); got != "n/a (nothing fits)" {
		t.Errorf("nothing fits: %q", got)
	}
}
