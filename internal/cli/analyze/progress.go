package analyze

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows the analysis' progress on stderr: events processed per stage.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	stage string
}

// newProgress returns a progress display on stderr, inactive unless show is set.
func newProgress(stderr io.Writer, show bool) *progress {
	if !show {
		return &progress{}
	}
	return &progress{w: stderr}
}

// update is analysis.Options.Progress.
func (p *progress) update(stage string, events uint64) {
	if p.w == nil {
		return
	}
	if p.bar == nil || stage != p.stage {
		if p.bar != nil {
			_ = p.bar.Finish()
		}
		p.stage = stage
		p.bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(stage), progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("events"), progressbar.OptionShowIts(),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set64(int64(events))
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
