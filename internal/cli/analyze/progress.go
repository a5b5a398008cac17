package analyze

import (
	"io"
	"strings"

	"github.com/allocscope/allocscope/internal/progress"
)

// analysisProgress shows the analysis' stages on stderr: the events the statistics pass read, then
// the requests each later stage replayed out of the trace's requests, with the rate and the time
// left.
type analysisProgress struct{ bar *progress.Bar }

// newProgress returns the display, inactive unless show is set.
func newProgress(stderr io.Writer, show bool) analysisProgress {
	return analysisProgress{progress.New(stderr, show)}
}

// update is analysis.Options.Progress.
func (p analysisProgress) update(stage string, done, total uint64) {
	unit := "requests"
	switch {
	case strings.HasPrefix(stage, "statistics "):
		unit = "events"
	case strings.HasPrefix(stage, "inputs"):
		unit = "inputs"
	}
	p.bar.Update(stage, unit, int64(done), int64(total))
}

func (p analysisProgress) finish() { p.bar.Finish() }
