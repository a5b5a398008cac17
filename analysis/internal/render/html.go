package render

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"gonum.org/v1/plot"

	"github.com/allocscope/allocscope/analysis/internal/model"
)

// HTML writes one self-contained page (no outside resources): for each analyzed stream, its
// terminal report and four inline SVG charts.
func HTML(w io.Writer, r *model.Report) error {
	var text strings.Builder
	if err := Text(&text, r); err != nil {
		return err
	}
	page := htmlPage{Title: "allocscope analyze: " + strings.Join(r.Inputs, ", "), Text: text.String()}
	for _, tr := range append([]*model.TraceReport{r.Combined}, r.PerFile...) {
		sec, err := section(tr)
		if err != nil {
			return err
		}
		page.Sections = append(page.Sections, sec)
	}
	return pageTemplate.Execute(w, page)
}

type htmlPage struct {
	Title    string
	Text     string
	Sections []htmlSection
}

type htmlSection struct {
	Name   string
	Charts []template.HTML
}

func section(tr *model.TraceReport) (htmlSection, error) {
	sec := htmlSection{Name: tr.Name}
	builders := []func() (*plot.Plot, error){
		func() (*plot.Plot, error) { return timelineChart(tr.Requests) },
		func() (*plot.Plot, error) { return histogramChart(tr.Requests) },
		func() (*plot.Plot, error) { return lifetimeChart(tr.Requests) },
		func() (*plot.Plot, error) { return policyChart(tr) },
	}
	for _, build := range builders {
		p, err := build()
		if err != nil {
			return sec, fmt.Errorf("chart for %s: %w", tr.Name, err)
		}
		s, err := svg(p)
		if err != nil {
			return sec, err
		}
		// The SVG comes from our own renderer, not from the trace.
		sec.Charts = append(sec.Charts, template.HTML(s)) // #nosec G203
	}
	return sec, nil
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(640px, 1fr)); gap: 1em; }
.chart svg { width: 100%; height: auto; border: 1px solid #ddd; }
pre { font-size: 12px; background: #f6f6f6; padding: 1em; overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{range .Sections}}<h2>{{.Name}}</h2>
<div class="charts">{{range .Charts}}<div class="chart">{{.}}</div>
{{end}}</div>
{{end}}<h2>Report</h2>
<pre>{{.Text}}</pre>
</body>
</html>
`))
