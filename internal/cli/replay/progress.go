package replay

import (
	"io"

	"github.com/allocscope/allocscope/internal/progress"
	"github.com/allocscope/allocscope/trace"
)

// replayProgress shows on stderr how far reading the trace and replaying it have come.
type replayProgress struct{ bar *progress.Bar }

// newProgress returns the display, inactive unless show is set.
func newProgress(stderr io.Writer, show bool) replayProgress {
	return replayProgress{progress.New(stderr, show)}
}

// progressReader is a trace.Reader that moves the bar after each batch: events read, out of the
// total the reader's own progress (batches or bytes) lets it estimate.
type progressReader struct {
	r      *trace.Reader
	bar    *progress.Bar
	events *int64
}

func (pr progressReader) Next() ([]trace.Event, error) {
	events, err := pr.r.Next()
	*pr.events += int64(len(events))
	done, total := pr.r.Progress()
	estimate := int64(0)
	if done > 0 && total > done {
		estimate = int64(float64(*pr.events) * float64(total) / float64(done))
	}
	pr.bar.Update("reading trace", "events", *pr.events, estimate)
	return events, err
}

// reading returns r as the source of replay.Extract, showing its progress.
func (p replayProgress) reading(r *trace.Reader) progressReader {
	return progressReader{r: r, bar: p.bar, events: new(int64)}
}

// replaying returns replay.Options.Progress for total requests.
func (p replayProgress) replaying(total int64) func(int64) {
	var done int64
	return func(n int64) {
		done += n
		p.bar.Update("replaying", "requests", done, total)
	}
}

func (p replayProgress) finish() { p.bar.Finish() }
