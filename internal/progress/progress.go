// Package progress is the one progress display of the commands: a bar per stage on stderr with
// how much is done out of the total (when known), the true rate and the time left.
//
// The rate is measured from the stage's first update, not from when the bar was made: work done
// before the first update (a first batch read before anything was reported) does not count as done
// in no time. It is shown once half a second has passed. The drawing is schollz/progressbar's.
package progress

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/allocscope/allocscope/internal/units"
)

// minElapsed is how long a stage runs before its rate is shown.
const minElapsed = 500 * time.Millisecond

// Bar shows the stages of one command. The zero value, and a Bar made with show false, draw
// nothing.
type Bar struct {
	w     io.Writer
	now   func() time.Time
	bar   *progressbar.ProgressBar
	stage string
	unit  string
	total int64
	first time.Time // the stage's first update
	from  int64     // done at the first update
}

// New returns a Bar drawing on w when show is set.
func New(w io.Writer, show bool) *Bar {
	if !show {
		return &Bar{}
	}
	return &Bar{w: w, now: time.Now}
}

// Update reports that done units of stage are done, out of total (0 or less: unknown). A new
// stage name finishes the previous stage's bar. unit names what is counted ("events").
func (b *Bar) Update(stage, unit string, done, total int64) {
	if b.w == nil {
		return
	}
	now := b.now()
	if b.bar == nil || stage != b.stage {
		b.Finish()
		b.stage, b.unit, b.total, b.first, b.from = stage, unit, total, now, done
		max := total
		if max <= 0 {
			max = -1
		}
		b.bar = progressbar.NewOptions64(max, progressbar.OptionSetWriter(b.w), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish(), progressbar.OptionSetDescription(stage))
	}
	if total > 0 && total != b.total {
		b.total = total
		b.bar.ChangeMax64(total)
	}
	b.bar.Describe(b.describe(done, now))
	_ = b.bar.Set64(done)
}

// describe is the stage's name with its rate and time left, once they can be told.
func (b *Bar) describe(done int64, now time.Time) string {
	elapsed := now.Sub(b.first)
	if elapsed < minElapsed || done <= b.from {
		return b.stage
	}
	rate := float64(done-b.from) / elapsed.Seconds()
	s := fmt.Sprintf("%s  %s %s/s", b.stage, units.FormatRate(rate), b.unit)
	if b.total > done && rate > 0 {
		left := time.Duration(float64(b.total-done) / rate * float64(time.Second))
		s += "  " + left.Round(time.Second).String() + " left"
	}
	return s
}

// Finish ends the current stage's bar.
func (b *Bar) Finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
		b.bar = nil
	}
}
