package progress

import (
	"strings"
	"testing"
	"time"
)

// The rate counts from the stage's first update (1,000 events already done then: not done in no
// time), shows after half a second, and the time left follows from it and the total.
func TestRateAndTimeLeft(t *testing.T) {
	var out strings.Builder
	clock := time.Unix(1000, 0)
	b := New(&out, true)
	b.now = func() time.Time { return clock }
	b.Update("statistics run.arrow", "events", 1000, 101000)
	if got := b.describe(1000, clock); got != "statistics run.arrow" {
		t.Errorf("at the first update: %q", got)
	}
	clock = clock.Add(200 * time.Millisecond)
	if got := b.describe(21000, clock); got != "statistics run.arrow" {
		t.Errorf("before half a second: %q", got)
	}
	clock = clock.Add(1800 * time.Millisecond)
	b.Update("statistics run.arrow", "events", 41000, 101000)
	if got, want := b.describe(41000, clock), "statistics run.arrow  20 k events/s  3s left"; got != want {
		t.Errorf("after 2 s: %q, want %q", got, want)
	}
	b.Update("simulation run.arrow", "events", 5000, 0)
	if got := b.describe(5000, clock.Add(time.Second)); got != "simulation run.arrow" {
		t.Errorf("a new stage with nothing done since its first update: %q", got)
	}
	b.Finish()
	if !strings.Contains(out.String(), "statistics run.arrow") {
		t.Errorf("nothing drawn: %q", out.String())
	}
	var none Bar
	none.Update("x", "events", 1, 2) // the zero value draws nothing and does not panic
	none.Finish()
}
