package analyze

import (
	"io"

	"github.com/allocscope/allocscope/internal/progress"
)

// analysisProgress shows the analysis' stages on stderr: events done, out of the trace's events
// once the statistics pass has counted them, with the rate and the time left.
type analysisProgress struct{ bar *progress.Bar }

// newProgress returns the display, inactive unless show is set.
func newProgress(stderr io.Writer, show bool) analysisProgress {
	return analysisProgress{progress.New(stderr, show)}
}

// update is analysis.Options.Progress.
func (p analysisProgress) update(stage string, events, total uint64) {
	p.bar.Update(stage, "events", int64(events), int64(total))
}

func (p analysisProgress) finish() { p.bar.Finish() }
