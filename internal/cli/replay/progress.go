package replay

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/allocscope/allocscope/trace"
)

// progress shows on stderr how far reading the trace and replaying it have come.
type progress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

// newProgress returns a progress display on stderr, inactive unless show is set.
func newProgress(stderr io.Writer, show bool) *progress {
	if !show {
		return &progress{}
	}
	return &progress{w: stderr}
}

func (p *progress) start(max int64, description, unit string) {
	p.finish()
	p.bar = progressbar.NewOptions64(max, progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(description), progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(unit), progressbar.OptionShowIts(),
		progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}

// progressReader is a trace.Reader that moves the bar after each batch.
type progressReader struct {
	r *trace.Reader
	p *progress
}

func (pr progressReader) Next() ([]trace.Event, error) {
	events, err := pr.r.Next()
	if pr.p.bar != nil {
		done, total := pr.r.Progress()
		if total > 0 && pr.p.bar.GetMax64() != total {
			pr.p.bar.ChangeMax64(total)
		}
		_ = pr.p.bar.Set64(done)
	}
	return events, err
}

// reading returns r as the source of replay.Extract, showing its progress.
func (p *progress) reading(r *trace.Reader) progressReader {
	if p.w != nil {
		p.start(-1, "reading trace", "parts")
	}
	return progressReader{r: r, p: p}
}

// replaying starts the replay's bar for total requests and returns replay.Options.Progress.
func (p *progress) replaying(total int64) func(int64) {
	if p.w == nil {
		return nil
	}
	p.start(total, "replaying", "requests")
	return func(n int64) { _ = p.bar.Add64(n) }
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}
