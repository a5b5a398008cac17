package render_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

// TestHTMLInBrowser loads the report of a 100,000-request trace with named callsites in headless
// Chromium and checks the timeline's levels of detail as it zooms, the tooltip of known points, the
// peak's mark, the sorting of the what-if table and the text report; then that the page wrote
// nothing to the console and requested nothing.
func TestHTMLInBrowser(t *testing.T) {
	b := newBrowser(t, 1400, 1000)
	events, reqs := trainingTrace(100_000)
	r := analyzeTrace(t, "train", events)
	page := writePage(t, t.TempDir(), r)
	b.load(t, page)
	tr := r.Combined
	if n := eval[int](t, b, `document.querySelectorAll(".uplot").length`); n != 4 {
		t.Errorf("%d charts drawn, want 4 (timeline, ratios, sizes, lifetimes)", n)
	}
	t.Run("levels", func(t *testing.T) { checkLevels(t, b, tr) })
	t.Run("drag and wheel", func(t *testing.T) { checkDragAndWheel(t, b, tr) })
	t.Run("hover", func(t *testing.T) { checkHover(t, b, tr, events, reqs) })
	t.Run("peak", func(t *testing.T) { checkPeak(t, b, tr) })
	t.Run("memory map", func(t *testing.T) { checkMaps(t, b, tr) })
	t.Run("sort", func(t *testing.T) { checkSort(t, b, tr) })
	t.Run("text", func(t *testing.T) {
		var want strings.Builder
		if err := render.Text(&want, r); err != nil {
			t.Fatal(err)
		}
		if got := eval[string](t, b, `document.querySelector("details.text pre").textContent`); got != want.String() {
			t.Errorf("the page's text report differs from render.Text's:\n%s", got)
		}
	})
	b.check(t, page)
}

// view is what the page says it draws: the x range, the level and the points in range.
type view struct {
	Range  [2]float64
	Level  int
	Points int
	Attr   [2]string // the timeline's data-level and data-visible-points
}

func readView(t *testing.T, b *browserTab) view {
	t.Helper()
	return eval[view](t, b, `(() => { const d = document.querySelector(".timeline").dataset;
		return {Range: allocscope.range(), Level: allocscope.level(), Points: allocscope.visiblePoints(),
			Attr: [d.level, d.visiblePoints]}; })()`)
}

// checkView checks that the page draws what expectedView computes for the range it shows.
func checkView(t *testing.T, b *browserTab, tr *schema.TraceReport) view {
	t.Helper()
	v := readView(t, b)
	level, points := expectedView(tr.Detail, tr.Requests.FirstTimeNs, v.Range[0], v.Range[1])
	if v.Level != level || v.Points != points || v.Attr != [2]string{strconv.Itoa(level), strconv.Itoa(points)} {
		t.Errorf("range %v: level %d with %d points (attributes %v), want level %d with %d", v.Range, v.Level,
			v.Points, v.Attr, level, points)
	}
	return v
}

func zoom(t *testing.T, b *browserTab, a, z float64) {
	t.Helper()
	eval[any](t, b, fmt.Sprintf("allocscope.zoom(%v, %v)", a, z))
}

func checkLevels(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	end := float64(tr.Detail.Events[len(tr.Detail.Events)-1].TimeNs-tr.Requests.FirstTimeNs) / 1e9
	peak := float64(tr.Requests.PeakTimeNs-tr.Requests.FirstTimeNs) / 1e9
	levels := map[int]bool{}
	for _, r := range [][2]float64{{0, end}, {end * 0.3, end * 0.7}, {end * 0.4, end * 0.6}, {end * 0.45, end * 0.5},
		{peak - end/200, peak + end/200}, {peak - 50e-6, peak + 50e-6}, {end / 3, end/3 + 2e-6}} {
		zoom(t, b, r[0], r[1])
		v := checkView(t, b, tr)
		if math.Abs(v.Range[0]-r[0]) > 1e-12 || math.Abs(v.Range[1]-r[1]) > 1e-12 {
			t.Errorf("zoom to %v shows %v", r, v.Range)
		}
		levels[v.Level] = true
	}
	if !levels[0] || len(levels) < 4 {
		t.Errorf("the zooms drew levels %v of %d: want the finest and three others", levels, len(tr.Detail.Levels))
	}
}

// overBox is where the timeline's plot area lies in the viewport.
type overBox struct{ Left, Top, Width, Height float64 }

func plotArea(t *testing.T, b *browserTab) overBox {
	return eval[overBox](t, b, `(() => { const r = allocscope.sections[0].plot.over.getBoundingClientRect();
		return {Left: r.left, Top: r.top, Width: r.width, Height: r.height}; })()`)
}

func checkDragAndWheel(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	eval[any](t, b, `allocscope.sections[0].plot.over.scrollIntoView()`)
	zoom(t, b, 0, 1e9) // everything
	o, before := plotArea(t, b), readView(t, b)
	y := o.Top + o.Height/2
	b.do(t, chromedp.MouseEvent(chromedp.MousePressed, o.Left+o.Width*0.25, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, o.Left+o.Width*0.4, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, o.Left+o.Width*0.5, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, o.Left+o.Width*0.5, y, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	dragged := checkView(t, b, tr)
	w := before.Range[1] - before.Range[0]
	if want := w / 4; math.Abs(dragged.Range[1]-dragged.Range[0]-want) > w/o.Width*2 ||
		math.Abs(dragged.Range[0]-w/4) > w/o.Width*2 {
		t.Errorf("dragging over the second quarter shows %v, want about [%g, %g]", dragged.Range, w/4, w/2)
	}
	b.do(t, chromedp.MouseEvent(chromedp.MouseWheel, o.Left+o.Width/2, y, func(p *input.DispatchMouseEventParams) {
		p.DeltaX, p.DeltaY = 1e-6, -120 // the protocol wants both, and leaves out zeros
	}))
	wheeled := checkView(t, b, tr)
	if got, want := wheeled.Range[1]-wheeled.Range[0], 0.8*(dragged.Range[1]-dragged.Range[0]); math.Abs(got-want) > want*1e-9 {
		t.Errorf("a wheel step shows %g s, want %g s (4/5)", got, want)
	}
}

// checkHover moves the mouse onto the peak's point and onto the first free drawn after it, and
// checks their tooltips against what the trace generator did.
func checkHover(t *testing.T, b *browserTab, tr *schema.TraceReport, events []trace.Event, reqs map[uint64]*request) {
	d, first := tr.Detail, tr.Requests.FirstTimeNs
	peak := slices.IndexFunc(d.Events, func(e schema.DetailEvent) bool { return e.Seq == tr.Requests.PeakSeq })
	if peak < 0 {
		t.Fatalf("the detail lacks the peak (seq %d)", tr.Requests.PeakSeq)
	}
	free := peak + slices.IndexFunc(d.Events[peak:], func(e schema.DetailEvent) bool { return e.Free })
	at := float64(d.Events[peak].TimeNs-first) / 1e9
	zoom(t, b, at-40e-6, at+40e-6)
	if v := checkView(t, b, tr); v.Level != 0 {
		t.Fatalf("level %d around the peak, want 0", v.Level)
	}
	for _, i := range []int{peak, free} {
		e := d.Events[i]
		req := reqs[e.Seq]
		what := "allocation of "
		if e.Free {
			what = "free of "
		}
		life := "still live at the end"
		if req.lifetime >= 0 {
			life = jsDuration(req.lifetime)
		}
		want := []string{strconv.FormatFloat(float64(e.TimeNs-first)/1e9, 'f', 6, 64) + " s · live " + render.Bytes(e.LiveBytes),
			what + render.Bytes(req.size) + " (seq " + strconv.FormatUint(e.Seq, 10) + ")", "callsite: " + req.site,
			fmt.Sprintf("stream: pid 100 dev 0 stream %#x", 7+(e.Seq/5000)%2), "lifetime: " + life}
		if w := d.Levels[0].BucketEvents; w > 1 {
			want = append(want, bucketLine(events, reqs, e.Seq, int(w)))
		}
		got := hover(t, b, i)
		if got.Event != strconv.Itoa(i) || !slices.Equal(got.Lines, want) {
			t.Errorf("tooltip of event %d (seq %d): %q, %q; want %d, %q", i, e.Seq, got.Event, got.Lines, i, want)
		}
	}
}

// bucketLine says whether request seq has the lowest or the highest live bytes of its bucket of
// w requests (every event of trainingTrace is a request, in seq order).
func bucketLine(events []trace.Event, reqs map[uint64]*request, seq uint64, w int) string {
	var live uint64
	lo, hi := uint64(math.MaxUint64), uint64(0)
	var at uint64
	k := int(seq-1) / w
	for _, e := range events[:min((k+1)*w, len(events))] {
		if e.Op == trace.OpFree {
			live -= reqs[e.Seq].size
		} else {
			live += e.Size
		}
		if int(e.Seq-1)/w == k {
			lo, hi = min(lo, live), max(hi, live)
		}
		if e.Seq == seq {
			at = live
		}
	}
	switch at {
	case hi:
		return fmt.Sprintf("the highest live bytes of %d requests", w)
	case lo:
		return fmt.Sprintf("the lowest live bytes of %d requests", w)
	}
	return "neither the lowest nor the highest of its bucket"
}

type tooltip struct {
	Event string
	Lines []string
}

// hover moves the mouse onto the point of event i and reads the tooltip.
func hover(t *testing.T, b *browserTab, i int) tooltip {
	t.Helper()
	p := eval[*struct{ X, Y float64 }](t, b, fmt.Sprintf("allocscope.pixel(%d)", i))
	if p == nil {
		t.Fatalf("event %d is not in view", i)
	}
	b.do(t, chromedp.MouseEvent(chromedp.MouseMoved, p.X, p.Y))
	return eval[tooltip](t, b, `(() => { const tip = document.querySelector(".timeline-box .tip");
		return {Event: tip.hidden ? "hidden" : tip.dataset.event, Lines: Array.from(tip.children, (c) => c.textContent)}; })()`)
}

// jsDuration is report.js's duration: three significant digits of s, ms, µs, or whole ns.
func jsDuration(ns int64) string {
	for _, u := range []struct {
		f    float64
		name string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
		if float64(ns) >= u.f {
			v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(ns)/u.f, 'g', 3, 64), 64)
			return strconv.FormatFloat(v, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(ns, 10) + " ns"
}

// checkPeak checks that the whole timeline reaches the peak and that the peak's mark is drawn there.
func checkPeak(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	zoom(t, b, 0, 1e9)
	got := eval[struct {
		Top, Peak float64
		Pixel     []int
	}](t, b, `(() => { const s = allocscope.sections[0], u = s.plot;
		const x = Math.round(u.valToPos(s.d.peak_t / 1e9, "x", true)), y = Math.round(u.valToPos(s.d.peak_v, "y", true));
		return {Top: Math.max(...u.data[1]), Peak: s.d.peak_v, Pixel: Array.from(u.ctx.getImageData(x, y, 1, 1).data)}; })()`)
	want := float64(tr.Requests.PeakLiveBytes)
	if got.Top != want || got.Peak != want || !slices.Equal(got.Pixel, []int{0xd6, 0x27, 0x28, 0xff}) {
		t.Errorf("timeline top %g, peak %g, pixel at the peak %v; want %g, %g and the mark's red", got.Top, got.Peak,
			got.Pixel, want, want)
	}
}

// checkSort clicks headers of the what-if table and checks the order of its rows.
func checkSort(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	reserved := func(s schema.Simulation) float64 { return float64(s.PeakReservedBytes) }
	ratio := func(s schema.Simulation) float64 { return s.ReservedRatio }
	index := map[string]float64{}
	for i, s := range tr.Simulations {
		index[s.Name] = float64(i)
	}
	byName := slices.Clone(tr.Simulations)
	slices.SortStableFunc(byName, func(x, y schema.Simulation) int { return strings.Compare(x.Name, y.Name) })
	var names []string
	for _, s := range byName {
		names = append(names, s.Name)
	}
	for _, c := range []struct {
		column int
		want   []string
	}{
		{3, sortedPolicies(tr.Simulations, reserved, true)},
		{3, sortedPolicies(tr.Simulations, reserved, false)},
		{4, sortedPolicies(tr.Simulations, ratio, true)},
		{2, names},
		{1, sortedPolicies(tr.Simulations, func(s schema.Simulation) float64 { return index[s.Name] }, true)},
	} {
		b.do(t, chromedp.Click(chromedp.CSS(fmt.Sprintf("table.whatif th:nth-child(%d)", c.column))))
		got := eval[[]string](t, b, `Array.from(document.querySelectorAll("table.whatif tbody tr"), (r) => r.cells[1].textContent)`)
		if !slices.Equal(got, c.want) {
			t.Errorf("sorted by column %d: %q, want %q", c.column, got, c.want)
		}
	}
}

// TestHTMLInBrowserPlain loads the report of two inputs analyzed without the detail: three
// sections (both inputs together, then each), each timeline the report's downsampled one drawn
// whole, tooltips with time and live bytes only, and nothing on the console.
func TestHTMLInBrowserPlain(t *testing.T) {
	b := newBrowser(t, 1400, 1000)
	events, _ := trainingTrace(20_000)
	var ins []analysis.Input
	for _, part := range [][]trace.Event{events[:8000], events[8000:]} {
		ins = append(ins, analysis.Input{Name: fmt.Sprintf("part%d", len(ins)),
			Open: func() (analysis.Source, error) { return &namedSource{events: part}, nil }})
	}
	r, err := analysis.Analyze(ins, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page := writePage(t, t.TempDir(), r)
	b.load(t, page)
	for i, tr := range append([]*schema.TraceReport{r.Combined}, r.PerFile...) {
		got := eval[[]int](t, b, fmt.Sprintf("[allocscope.sections.length, allocscope.level(%d), allocscope.visiblePoints(%d)]", i, i))
		if want := []int{3, 0, len(tr.Requests.Timeline)}; !slices.Equal(got, want) {
			t.Errorf("section %d (%s): sections, level, points %v; want %v", i, tr.Name, got, want)
		}
	}
	tl, first := r.Combined.Requests.Timeline, r.Combined.Requests.FirstTimeNs
	mid := len(tl) / 2
	zoom(t, b, (tl[mid-20].X-float64(first))/1e9, (tl[mid+20].X-float64(first))/1e9)
	got := hover(t, b, mid)
	if want := " s · live " + render.Bytes(uint64(tl[mid].Y)); got.Event != strconv.Itoa(mid) ||
		len(got.Lines) != 1 || !strings.HasSuffix(got.Lines[0], want) {
		t.Errorf("tooltip of point %d: %q %q, want one line ending %q", mid, got.Event, got.Lines, want)
	}
	b.check(t, page)
}

// checkMaps checks the memory maps at the peak: one for the recommended pool and one for PyTorch's
// defaults, each with a row per region shown and the line of the regions left out when some are;
// hovering the middle of a region's largest entry shows that entry: its size, offset, region and
// callsite, as the report has them.
func checkMaps(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	var maps []schema.Simulation
	for _, s := range tr.Simulations {
		if s.PeakMap != nil {
			maps = append(maps, s)
		}
	}
	if len(maps) != 2 || maps[0].Name != "recommended" || maps[1].Name != "pytorch" {
		t.Fatalf("%d maps in the report, want the recommended pool's and PyTorch's", len(maps))
	}
	for k, s := range maps {
		m := s.PeakMap
		sel := fmt.Sprintf(`.pmap[data-map="%d"]`, k)
		got := eval[[]int](t, b, fmt.Sprintf(`[document.querySelectorAll('%s .pm-row').length,
			document.querySelectorAll('%s .pm-more').length, allocscope.maps[0].length]`, sel, sel))
		more := 0
		if m.Regions > len(m.Shown) {
			more = 1
		}
		if want := []int{len(m.Shown), more, 2}; !slices.Equal(got, want) || len(m.Shown) == 0 {
			t.Errorf("%s: rows, more lines, maps %v; want %v (%d regions)", s.Name, got, want, m.Regions)
		}
		if k == 1 && more == 0 {
			t.Errorf("PyTorch's map has %d regions: the test wants more than it lists, to check the line of the others", m.Regions)
		}
		for _, j := range []int{0, len(m.Shown) - 1} {
			r := m.Shown[j]
			i := 0
			for x, e := range r.Blocks {
				if e.SizeBytes > r.Blocks[i].SizeBytes {
					i = x
				}
			}
			eval[any](t, b, fmt.Sprintf(`allocscope.maps[0][%d].bars[%d].scrollIntoView({block: "center"})`, k, j))
			p := eval[struct{ X, Y float64 }](t, b, fmt.Sprintf("allocscope.mapPixel(%d, %d, %d)", k, j, i))
			b.do(t, chromedp.MouseEvent(chromedp.MouseMoved, p.X, p.Y))
			tip := eval[mapTip](t, b, fmt.Sprintf(`(() => { const tip = document.querySelector('%s .tip');
				return {Hidden: tip.hidden, Region: tip.dataset.region, Block: tip.dataset.block,
					Lines: Array.from(tip.children, (c) => c.textContent)}; })()`, sel))
			want := mapTip{Region: strconv.Itoa(j), Block: strconv.Itoa(i), Lines: mapLines(r, r.Blocks[i])}
			if !tip.equal(want) || !strings.Contains(tip.Lines[0], render.Bytes(r.Blocks[i].SizeBytes)) {
				t.Errorf("%s: hovering region %d entry %d shows %+v, want %+v", s.Name, j, i, tip, want)
			}
		}
	}
}

type mapTip struct {
	Hidden        bool
	Region, Block string
	Lines         []string
}

func (a mapTip) equal(b mapTip) bool {
	return a.Hidden == b.Hidden && a.Region == b.Region && a.Block == b.Block && slices.Equal(a.Lines, b.Lines)
}

// mapLines is report.js's tooltip of map entry e of region r.
func mapLines(r schema.MapRegion, e schema.MapBlock) []string {
	kind := r.Kind
	if r.Stream != 0 {
		kind += fmt.Sprintf(" · stream %#x", r.Stream)
	}
	if r.Expandable {
		kind += " · expandable"
	}
	var first string
	switch {
	case e.Blocks > 1:
		first = fmt.Sprintf("%d blocks together, %s: %s live, %s free", e.Blocks, render.Bytes(e.SizeBytes),
			render.Bytes(e.LiveBytes), render.Bytes(e.SizeBytes-e.LiveBytes))
	case e.LiveBytes > 0:
		first = "live block of " + render.Bytes(e.SizeBytes)
	default:
		first = "free (cached), " + render.Bytes(e.SizeBytes)
	}
	if e.Blocks == 1 && e.ClassBytes > 0 {
		if e.SizeBytes > e.ClassBytes {
			first += fmt.Sprintf(" (%d slots of class %s)", e.SizeBytes/e.ClassBytes, render.Bytes(e.ClassBytes))
		} else {
			first += " (a slot of class " + render.Bytes(e.ClassBytes) + ")"
		}
	}
	lines := []string{first, fmt.Sprintf("offset %#x in %s region %s (%s, %s free)", e.Offset, kind, r.Address,
		render.Bytes(r.SizeBytes), render.Bytes(r.FreeBytes))}
	if e.LiveBytes > 0 {
		site := cmp.Or(e.Callsite, "unknown")
		by := " by "
		if e.Blocks > 1 {
			by = "; the largest live block from "
		}
		lines = append(lines, "requested "+render.Bytes(e.RequestedBytes)+by+site)
	}
	return lines
}
