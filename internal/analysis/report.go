package analysis

import (
	"io"

	"github.com/allocscope/allocscope/internal/analysis/internal/render"
)

// WriteText writes the terminal report (lines of at most 100 columns): each trace's answer
// first, its details after it, without the sizing rules.
func WriteText(w io.Writer, r *Report) error { return render.Text(w, r) }

// TextOptions are the choices of the terminal report: Explain adds the rules the size classes,
// the large-request threshold and the arena were chosen by.
type TextOptions = render.TextOptions

// WriteTextWith writes the terminal report with opts.
func WriteTextWith(w io.Writer, r *Report, opts TextOptions) error {
	return render.TextWith(w, r, opts)
}

// WriteJSON writes the report as JSON; the field names are stable.
func WriteJSON(w io.Writer, r *Report) error { return render.JSON(w, r) }

// WriteHTML writes one self-contained interactive HTML page with the report's charts and tables
// and the terminal report. Its timeline has the request behind each point when the analysis ran
// with Options.Detail.
func WriteHTML(w io.Writer, r *Report) error { return render.HTML(w, r) }
