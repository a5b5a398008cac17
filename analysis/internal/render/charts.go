package render

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/allocscope/allocscope/analysis/internal/model"
)

const (
	chartWidth  = 7 * vg.Inch
	chartHeight = 3.2 * vg.Inch
)

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// namespaces drops the XML prolog and namespace declarations, which inline SVG in HTML does not
// need, so the page names no outside address at all.
var namespaces = regexp.MustCompile(`<\?xml[^>]*\?>\s*|\s+xmlns(:\w+)?="[^"]*"`)

// svg draws p into an SVG document.
func svg(p *plot.Plot) (string, error) {
	c := vgsvg.New(chartWidth, chartHeight)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("draw chart %q: %w", p.Title.Text, err)
	}
	return namespaces.ReplaceAllString(buf.String(), ""), nil
}

// timelineChart plots live bytes over time (seconds from the first event) with the peak marked.
func timelineChart(s *model.Stats) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Live bytes over time"
	p.X.Label.Text = "seconds from start"
	p.Y.Label.Text = "live MiB"
	xys := make(plotter.XYs, len(s.Timeline))
	for i, pt := range s.Timeline {
		xys[i] = plotter.XY{X: (pt.X - float64(s.FirstTimeNs)) / 1e9, Y: pt.Y / (1 << 20)}
	}
	if len(xys) == 0 {
		xys = plotter.XYs{{}}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	line.Color = blue
	peak := plotter.XYs{{X: float64(s.PeakTimeNs-s.FirstTimeNs) / 1e9, Y: float64(s.PeakLiveBytes) / (1 << 20)}}
	mark, err := plotter.NewScatter(peak)
	if err != nil {
		return nil, err
	}
	mark.Color = red
	mark.Radius = vg.Points(4)
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: peak,
		Labels: []string{" peak " + Bytes(s.PeakLiveBytes)}})
	if err != nil {
		return nil, err
	}
	p.Add(line, mark, labels, plotter.NewGrid())
	p.X.Min = 0
	p.Y.Min, p.Y.Max = 0, 1.15*peak[0].Y+1e-9 // room above the peak for its label
	return p, nil
}

// histogramChart plots the request count of every log2 size bucket.
func histogramChart(s *model.Stats) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Request sizes (log2 buckets)"
	p.Y.Label.Text = "requests"
	vals := make(plotter.Values, len(s.Histogram))
	names := make([]string, len(s.Histogram))
	for i, b := range s.Histogram {
		vals[i] = float64(b.Count)
		names[i] = Bytes(b.Lo)
	}
	if len(vals) == 0 {
		vals, names = plotter.Values{0}, []string{"none"}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(max(4, 360/float64(len(vals)))))
	if err != nil {
		return nil, err
	}
	bars.Color = blue
	p.Add(bars, plotter.NewGrid())
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	return p, nil
}

// lifetimeChart plots the lifetime CDF on a log time axis.
func lifetimeChart(s *model.Stats) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Allocation lifetime CDF"
	p.X.Label.Text = "lifetime (µs, log scale)"
	p.Y.Label.Text = "fraction of frees"
	var xys plotter.XYs
	for _, pt := range s.LifetimeCDF {
		xys = append(xys, plotter.XY{X: max(pt.X/1e3, 1e-3), Y: pt.Y})
	}
	if len(xys) == 0 {
		xys = plotter.XYs{{X: 1, Y: 0}}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	line.Color = blue
	p.Add(line, plotter.NewGrid())
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// policyChart plots each policy's peak reserved bytes next to the peak live bytes.
func policyChart(tr *model.TraceReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Simulated policies: peak reserved vs peak live"
	p.Y.Label.Text = "MiB"
	var reserved, live plotter.Values
	var names []string
	for _, s := range tr.Simulations {
		names = append(names, s.Name)
		reserved = append(reserved, float64(s.PeakReservedBytes)/(1<<20))
		live = append(live, float64(tr.Requests.PeakLiveBytes)/(1<<20))
	}
	if len(names) == 0 {
		names, reserved, live = []string{"none"}, plotter.Values{0}, plotter.Values{0}
	}
	w := vg.Points(14)
	rb, err := plotter.NewBarChart(reserved, w)
	if err != nil {
		return nil, err
	}
	lb, err := plotter.NewBarChart(live, w)
	if err != nil {
		return nil, err
	}
	rb.Color, lb.Color = orange, blue
	rb.Offset, lb.Offset = -w/2, w/2
	p.Add(rb, lb, plotter.NewGrid())
	p.Legend.Add("peak reserved", rb)
	p.Legend.Add("peak live", lb)
	p.Legend.Top = true
	top := 0.0
	for _, v := range append(reserved, live...) {
		top = max(top, v)
	}
	p.Y.Min, p.Y.Max = 0, 1.3*top+1e-9 // room above the bars for the legend
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 8
	p.X.Tick.Label.XAlign = draw.XRight
	return p, nil
}
