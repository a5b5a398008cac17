package render

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/pool"
)

// assets are the page's template, its script and style, and the vendored uPlot (see
// assets/uplot/README.md).
//
//go:embed assets/page.html assets/report.js assets/report.css assets/uplot/uPlot.iife.min.js assets/uplot/uPlot.min.css
//go:embed assets/uplot/LICENSE
var assets embed.FS

// HTML writes one self-contained interactive page (no outside resources, no network fetches): for
// each analyzed stream a zoomable live-bytes timeline with the event behind each point, the memory
// of every simulated policy at its peak, the memory maps of the recommended pool and of PyTorch's
// caching allocator at their peaks (schema.PeakMap: a bar per region, blocks coloured by callsite),
// the size histogram and classes, the what-if table and the callsites; then the terminal report.
func HTML(w io.Writer, r *schema.Report) error {
	var text strings.Builder
	if err := Text(&text, r); err != nil {
		return err
	}
	page := htmlPage{Title: "allocscope analyze: " + strings.Join(r.Inputs, ", "), Text: text.String(),
		Warnings: r.Warnings}
	for i, tr := range append([]*schema.TraceReport{r.Combined}, r.PerFile...) {
		sec, err := section(i, tr)
		if err != nil {
			return err
		}
		page.Sections = append(page.Sections, sec)
	}
	var err error
	if page.Assets, err = loadAssets(); err != nil {
		return err
	}
	if err := pageTemplate.Execute(w, page); err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	return nil
}

// pageAssets are the embedded script and style, written into the page.
type pageAssets struct {
	UPlotJS, ReportJS   template.JS
	UPlotCSS, ReportCSS template.CSS
}

// loadAssets reads the embedded script and style; uPlot's license goes into the page with it.
func loadAssets() (pageAssets, error) {
	var files [5]string
	for i, name := range []string{"uplot/uPlot.iife.min.js", "report.js", "uplot/uPlot.min.css", "report.css",
		"uplot/LICENSE"} {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			return pageAssets{}, fmt.Errorf("html asset %s: %w", name, err)
		}
		files[i] = string(b)
	}
	// The files are ours or the vendored library's, not the trace's.
	return pageAssets{UPlotJS: template.JS("/*\n" + files[4] + "*/\n" + files[0]), // #nosec G203
		ReportJS: template.JS(files[1]), UPlotCSS: template.CSS(files[2]), ReportCSS: template.CSS(files[3])}, nil // #nosec G203
}

type htmlPage struct {
	Title    string
	Text     string
	Warnings []string
	Sections []htmlSection
	Assets   pageAssets
}

// htmlSection is one analyzed stream: its summary, tables and the JSON its charts draw.
type htmlSection struct {
	Index      int
	Name       string
	Summary    []template.HTML
	Data       template.JS
	Policies   []policyRow
	Maps       []mapView
	Classes    *classTable
	Callsites  []callsiteTable
	Fragmented []segmentRow
	Answer     *answerView // the report's answer, the section's first block
	Anomalies  anomalyView
	Note       string // schema.TraceReport.CallsiteNote
}

func section(i int, tr *schema.TraceReport) (htmlSection, error) {
	sec := htmlSection{Index: i, Name: tr.Name, Summary: summary(tr), Policies: policies(tr),
		Classes: classes(tr.SizeClasses), Fragmented: fragmented(tr.OOM), Answer: answerOf(tr.Answer),
		Anomalies: anomalies(&tr.Anomalies), Note: tr.CallsiteNote}
	data := charts(tr)
	sec.Maps, data.Maps = peakMaps(tr.Simulations)
	data.Stacks = usedStacks(tr, &data)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // escapes <, > and &: the JSON cannot end its script element
	if err := enc.Encode(data); err != nil {
		return htmlSection{}, fmt.Errorf("chart data of %s: %w", tr.Name, err)
	}
	sec.Data = template.JS(buf.String()) // #nosec G203 -- JSON with <, >, & escaped
	for _, c := range []struct {
		title string
		rows  []schema.CallsiteTally
	}{{"held the most at the peak of live bytes", tr.PeakCallsites}, {"allocated the most bytes", tr.TopCallsites}} {
		if len(c.rows) > 0 {
			sec.Callsites = append(sec.Callsites, callsiteTable{Title: c.title, Rows: c.rows})
		}
	}
	return sec, nil
}

// summary is the stream's headline figures, each number marked with where the JSON report has it
// (figure).
func summary(tr *schema.TraceReport) []template.HTML {
	s := tr.Requests
	out := []template.HTML{
		line("%s events; %s requests (%s layer): %s allocations, %s frees", figure("events", tr.Events, Count(tr.Events)),
			plain(Count(s.Allocs+s.Frees)), plain(tr.RequestLayer), figure("requests.allocs", s.Allocs, Count(s.Allocs)),
			figure("requests.frees", s.Frees, Count(s.Frees))),
		line("peak live %s in %s blocks at %s (seq %s); live at the end %s",
			figure("requests.peak_live_bytes", s.PeakLiveBytes, Bytes(s.PeakLiveBytes)), figure("requests.peak_live_blocks", s.PeakLiveBlocks, Count(s.PeakLiveBlocks)),
			plain(Duration(float64(s.PeakTimeNs-s.FirstTimeNs))), figure("requests.peak_seq", s.PeakSeq, strconv.FormatUint(s.PeakSeq, 10)),
			figure("requests.end_live_bytes", s.EndLiveBytes, Bytes(s.EndLiveBytes))),
	}
	if h := tr.Anomalies.HeldByAllocator; h != nil {
		out = append(out, line("held by %s's allocator until exit: %s segments, %s (not leaks); leaks %s, %s",
			plain(h.Framework), figure("anomalies.held_by_allocator.count", h.Count, Count(h.Count)),
			figure("anomalies.held_by_allocator.bytes", h.Bytes, Bytes(h.Bytes)),
			figure("anomalies.leaks.count", tr.Anomalies.Leaks.Count, Count(tr.Anomalies.Leaks.Count)),
			figure("anomalies.leaks.bytes", tr.Anomalies.Leaks.Bytes, Bytes(tr.Anomalies.Leaks.Bytes))))
	}
	if fw := tr.Framework; fw != nil && fw.Layer == "driver" {
		out = append(out, line("%s", plain(segmentsNote(fw))), line("to see %s's requests: %s", plain(fw.Framework),
			plain(fw.SeeRequests)))
	}
	if fw := tr.Framework; fw != nil && fw.Layer == "framework" {
		out = append(out, line("first, %s's own setting: %s (predicted peak reserved %s)", plain(fw.Framework),
			plain(fw.Setting), figure("framework.peak_reserved_bytes", fw.PeakReservedBytes, Bytes(fw.PeakReservedBytes))))
	}
	if c := tr.Config; c != nil && c.Prediction != nil {
		p := c.Prediction
		out = append(out, line("recommended pool: %s; predicted peak reserved %s for peak live %s",
			poolSettings(c), figure("config.prediction.peak_reserved_bytes", p.PeakReservedBytes, Bytes(p.PeakReservedBytes)),
			figure("config.prediction.peak_live_bytes", p.PeakLiveBytes, Bytes(p.PeakLiveBytes))))
	}
	return out
}

// poolSettings names the pool of c for the headline: its classes and its arena, a paged arena by
// the bytes it keeps mapped at most (its address space, ArenaBytes, is not memory it holds).
func poolSettings(c *pool.Config) template.HTML {
	sc := c.SizeClass
	if sc == nil {
		return plain(string(c.Policy))
	}
	classes := line("%s classes up to %s", plain(strconv.Itoa(len(sc.Classes))),
		figure("config.size_class.large_threshold_bytes", sc.LargeThreshold, Bytes(sc.LargeThreshold)))
	if pg := sc.ArenaPaging; pg != nil {
		return line("%s, a paged arena of at most %s mapped (%s of address space)", classes,
			figure("config.size_class.arena_paging.budget_bytes", pg.BudgetBytes, Bytes(pg.BudgetBytes)),
			figure("config.size_class.arena_bytes", sc.ArenaBytes, Bytes(sc.ArenaBytes)))
	}
	return line("%s, an arena of %s", classes, figure("config.size_class.arena_bytes", sc.ArenaBytes, Bytes(sc.ArenaBytes)))
}

// figure is a number of the page as it shows it: text is v formatted, data-json is where the JSON
// report has v (from the stream's report: "requests.peak_live_bytes") and data-v is v, so that a
// test can check the page against the JSON.
func figure(path string, v any, text string) template.HTML {
	return template.HTML(fmt.Sprintf(`<b class="fig" data-json="%s" data-v="%v">%s</b>`, // #nosec G203 -- escaped
		html.EscapeString(path), v, html.EscapeString(text)))
}

// plain is text of the headline, escaped.
func plain(s string) template.HTML { return template.HTML(html.EscapeString(s)) } // #nosec G203 -- escaped

// line fills format (text of ours) with parts already escaped.
func line(format string, parts ...template.HTML) template.HTML {
	args := make([]any, len(parts))
	for i, p := range parts {
		args[i] = string(p)
	}
	return template.HTML(fmt.Sprintf(format, args...)) // #nosec G203 -- our format, escaped parts
}

// policyRow is one simulated policy in the what-if table and the memory map at its peak.
type policyRow struct {
	schema.Simulation
	Calls              uint64
	Requested          uint64  // bytes requested at peak reserved
	Width              float64 // the bar's width, % of the largest peak reserved
	Req, Int, Ext      float64 // the bar's parts, % of the bar
	Recommended, Torch bool
	Saved              string // the "time saved" cell as the text report writes it (timeSaved)
}

func policies(tr *schema.TraceReport) []policyRow {
	var top uint64
	for _, s := range tr.Simulations {
		top = max(top, s.PeakReservedBytes)
	}
	var rows []policyRow
	for i, s := range tr.Simulations {
		r := policyRow{Simulation: s, Calls: s.UpstreamReserves + s.UpstreamReleases, Recommended: i == 0,
			Torch: s.Policy == "pytorch" && s.Settings == "(defaults)", Saved: timeSaved(s, tr.RequestLayer)}
		frag := s.InternalFragBytes + s.ExternalFragBytes
		if s.PeakReservedBytes > 0 && top > 0 && frag <= s.PeakReservedBytes {
			r.Requested = s.PeakReservedBytes - frag
			res := float64(s.PeakReservedBytes)
			r.Width = 100 * res / float64(top)
			r.Req, r.Int, r.Ext = 100*float64(r.Requested)/res, 100*float64(s.InternalFragBytes)/res,
				100*float64(s.ExternalFragBytes)/res
		}
		rows = append(rows, r)
	}
	return rows
}

// classTable is the size-class plan.
type classTable struct {
	Line string
	Rows []schema.ClassPlan
}

func classes(p *schema.SizeClassPlan) *classTable {
	if p == nil {
		return nil
	}
	line := fmt.Sprintf("%d classes up to %s (%s), larger requests from an arena of %s; pool %s for %s live at most",
		p.K, Bytes(p.LargeThreshold), p.KRule, Bytes(p.ArenaBytes), Bytes(p.PoolBytes), Bytes(p.PeakLiveBytes))
	return &classTable{Line: line, Rows: p.Classes}
}

// callsiteTable is one list of callsites.
type callsiteTable struct {
	Title string
	Rows  []schema.CallsiteTally
}

// segmentRow is a fragmented segment of a PyTorch out-of-memory, as a bar: its blocks in use and
// its free bytes, the largest free block apart.
type segmentRow struct {
	schema.FragmentedSegment
	Used, Largest, OtherFree float64 // % of the segment
	Pins                     string
}

func fragmented(o *schema.OOMReport) []segmentRow {
	if o == nil {
		return nil
	}
	var rows []segmentRow
	for _, s := range o.Fragmented {
		if s.SizeBytes == 0 || s.FreeBytes > s.SizeBytes || s.LargestFree > s.FreeBytes {
			continue
		}
		size := float64(s.SizeBytes)
		r := segmentRow{FragmentedSegment: s, Used: 100 * float64(s.SizeBytes-s.FreeBytes) / size,
			Largest: 100 * float64(s.LargestFree) / size, OtherFree: 100 * float64(s.FreeBytes-s.LargestFree) / size}
		var pins []string
		for _, p := range s.PinnedBy {
			pins = append(pins, Bytes(p.SizeBytes)+" by "+p.Callsite)
		}
		r.Pins = strings.Join(pins, "; ")
		rows = append(rows, r)
	}
	return rows
}

var pageTemplate = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"bytes": Bytes, "count": Count,
	"pct":   func(f float64) template.CSS { return template.CSS(fmt.Sprintf("%.3f%%", f)) }, // #nosec G203
	"ratio": func(f float64) string { return fmt.Sprintf("%.3f", f) },
}).ParseFS(assets, "assets/page.html"))
