package analysis

import (
	"io"

	"github.com/allocscope/allocscope/analysis/internal/render"
)

// WriteText writes the terminal report (tables that fit 100 columns).
func WriteText(w io.Writer, r *Report) error { return render.Text(w, r) }

// WriteJSON writes the report as JSON; the field names are stable.
func WriteJSON(w io.Writer, r *Report) error { return render.JSON(w, r) }

// WriteHTML writes one self-contained interactive HTML page with the report's charts and tables
// and the terminal report. Its timeline has the request behind each point when the analysis ran
// with Options.Detail.
func WriteHTML(w io.Writer, r *Report) error { return render.HTML(w, r) }
