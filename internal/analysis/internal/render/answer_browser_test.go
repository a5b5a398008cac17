package render_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

// kvcacheReport analyzes the KV-cache generation snapshot with --arena paged (a paged arena,
// whose address space the headline once gave as its reserved bytes; PyTorch stacks, two leaks)
// once for the tests that load its page.
var kvcacheReport = sync.OnceValues(func() (*schema.Report, error) {
	path := filepath.Join("..", "..", "..", "..", "testdata", "torch", "kvcache.caching.snapshot.pickle.gz")
	in := analysis.Input{Name: "kvcache", Open: func() (analysis.Source, error) { return trace.Open(path) }}
	return analysis.Analyze([]analysis.Input{in}, analysis.Options{Detail: true, Arena: analysis.ArenaPaged})
})

// TestHTMLKVCacheInBrowser loads the KV-cache snapshot's report in a 1024-pixel-wide Chromium and
// checks the answer and headline against the JSON report, the page's width, the memory maps'
// colours, the size histogram, the ratio bars, the anomalies table and the stacks on hover.
func TestHTMLKVCacheInBrowser(t *testing.T) {
	r, err := kvcacheReport()
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, 1024, 900)
	page := writePage(t, t.TempDir(), r)
	b.load(t, page)
	tr := r.Combined
	t.Run("figures", func(t *testing.T) { checkFigures(t, b, r) })
	t.Run("headline", func(t *testing.T) { checkHeadline(t, b, tr) })
	t.Run("width", func(t *testing.T) { checkWidth(t, b) })
	t.Run("map colours", func(t *testing.T) { checkMapColours(t, b) })
	t.Run("histogram", func(t *testing.T) { checkHistogram(t, b, tr) })
	t.Run("ratios", func(t *testing.T) { checkRatios(t, b, tr) })
	t.Run("anomalies", func(t *testing.T) { checkAnomalies(t, b, tr) })
	t.Run("stacks", func(t *testing.T) { checkStacks(t, b, tr) })
	b.check(t, page)
}

// pageFigure is a number the page shows with where the JSON report has it.
type pageFigure struct {
	Section   int
	Path, V   string
	Text, Row string
}

// checkFigures checks every number of the page marked with its JSON path (the answer's and the
// headline's) against the JSON report: the same value, and of the answer at least the three
// figures of the KV-cache run (peak live, today's and the recommendation's peak reserved; PyTorch's
// defaults are best there, so no saving is marked).
func checkFigures(t *testing.T, b *browserTab, r *schema.Report) {
	var js bytes.Buffer
	if err := render.JSON(&js, r); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&js)
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	figs := eval[[]pageFigure](t, b, `Array.from(document.querySelectorAll("b.fig"), (f) => ({
		Section: +f.closest("section").id.replace("stream-", ""), Path: f.dataset.json, V: f.dataset.v,
		Text: f.textContent, Row: f.closest("li, tr").textContent}))`)
	answer := 0
	for _, f := range figs {
		tr := doc["combined"]
		if f.Section > 0 {
			tr = doc["per_file"].([]any)[f.Section-1]
		}
		got, ok := jsonAt(tr, f.Path)
		if !ok || !sameNumber(got, f.V) {
			t.Errorf("%s shows %s (%q in %q); the JSON report has %v", f.Path, f.V, f.Text, f.Row, got)
		}
		if strings.HasPrefix(f.Path, "answer.") {
			answer++
		}
	}
	if answer < 3 {
		t.Errorf("%d figures of the answer marked, want at least 3", answer)
	}
}

// jsonAt is the value at a dotted path of a decoded JSON document.
func jsonAt(doc any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[k]; !ok {
			return nil, false
		}
	}
	return doc, true
}

// sameNumber reports whether a JSON number is the page's data-v: the same integer, or the same
// float64.
func sameNumber(v any, s string) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	if n.String() == s {
		return true
	}
	a, err1 := strconv.ParseFloat(n.String(), 64)
	c, err2 := strconv.ParseFloat(s, 64)
	return err1 == nil && err2 == nil && a == c
}

// checkHeadline checks that the answer is the section's first block, and its first line and the
// headline's pool line word for word: the reserved figure is the predicted peak reserved (329 MiB),
// the paged arena's 1.2 GiB only its address space.
func checkHeadline(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	if first := eval[string](t, b, `document.querySelector("#stream-0 h2").nextElementSibling.className`); first != "answer" {
		t.Errorf("the section's first block is %q, want the answer", first)
	}
	got := eval[[]string](t, b, `[document.querySelector("#stream-0 .answer .advice").textContent,
		Array.from(document.querySelectorAll("#stream-0 .summary li")).pop().textContent]`)
	sc, p := tr.Config.SizeClass, tr.Config.Prediction
	want := []string{tr.Answer.Recommendation.Summary, fmt.Sprintf("recommended pool: %d classes up to %s, a paged arena "+
		"of at most %s mapped (%s of address space); predicted peak reserved %s for peak live %s", len(sc.Classes),
		render.Bytes(sc.LargeThreshold), render.Bytes(sc.ArenaPaging.BudgetBytes), render.Bytes(sc.ArenaBytes),
		render.Bytes(p.PeakReservedBytes), render.Bytes(p.PeakLiveBytes))}
	if !slices.Equal(got, want) || !strings.Contains(got[1], "predicted peak reserved 329 MiB for peak live 314.2 MiB") {
		t.Errorf("answer and pool line %q, want %q", got, want)
	}
}

// checkWidth checks that nothing makes the 1024-pixel page scroll sideways and that the what-if
// table's box ends inside it.
func checkWidth(t *testing.T, b *browserTab) {
	got := eval[[]float64](t, b, `[document.documentElement.clientWidth, document.documentElement.scrollWidth,
		document.querySelector(".whatif").closest(".wide").getBoundingClientRect().right]`)
	if got[0] > 1024 || got[1] > got[0] || got[2] > got[0] {
		t.Errorf("viewport %g px wide, page %g px, what-if box ends at %g px: want no horizontal overflow", got[0], got[1], got[2])
	}
}

// checkMapColours checks that a callsite has one colour in both memory maps, in the blocks and in
// the legends, and that the maps share callsites to compare.
func checkMapColours(t *testing.T, b *browserTab) {
	type legend struct{ Text, Color string }
	got := eval[struct {
		Sites  [][]string
		Colors [][]string
		Legend [][]legend
	}](t, b, `(() => { const ms = allocscope.maps[0];
		return {Sites: ms.map((m) => m.d.sites), Colors: ms.map((m) => m.d.colors),
			Legend: ms.map((m) => Array.from(m.root.querySelectorAll(".legend span"), (s) => ({
				Text: s.nextSibling ? s.nextSibling.textContent.replace(/: [^:]*$/, "") : "", Color: s.style.background})))}; })()`)
	if len(got.Sites) != 2 {
		t.Fatalf("%d maps, want 2", len(got.Sites))
	}
	color, legends, shared := map[string]string{}, map[string]string{}, 0
	for m := range got.Sites {
		for i, site := range got.Sites[m] {
			if c, ok := color[site]; ok {
				shared++
				if c != got.Colors[m][i] {
					t.Errorf("%s is %s in one map and %s in the other", site, c, got.Colors[m][i])
				}
			}
			color[site] = got.Colors[m][i]
		}
		for _, l := range got.Legend[m] {
			if c, ok := legends[l.Text]; ok && c != l.Color {
				t.Errorf("legend of %s: %s in one map, %s in the other", l.Text, c, l.Color)
			}
			legends[l.Text] = l.Color
		}
	}
	if shared < 3 {
		t.Errorf("%d callsites in both maps, want at least 3 to compare", shared)
	}
}

// checkHistogram checks that the size histogram has a bar per power of two from the smallest
// request's bucket to the largest's, the report's count on each, 0 on the buckets it leaves out.
func checkHistogram(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	got := eval[struct {
		Labels []string
		Values []float64
	}](t, b, `allocscope.histogram()`)
	h := tr.Requests.Histogram
	var labels []string
	var values []float64
	count := map[uint64]uint64{}
	for _, x := range h {
		count[x.Lo] = x.Count
	}
	for lo := h[0].Lo; lo <= h[len(h)-1].Lo; lo *= 2 {
		labels, values = append(labels, render.Bytes(lo)), append(values, float64(count[lo]))
	}
	if !slices.Equal(got.Labels, labels) || !slices.Equal(got.Values, values) || len(labels) <= len(h) {
		t.Errorf("histogram %q %v, want %q %v (the report has %d buckets)", got.Labels, got.Values, labels, values, len(h))
	}
}

// checkRatios checks that the peak reserved over peak live bars start below the least ratio, not
// at 0 (1.047 and 1.060 look alike from 0), and carry their values to three decimals.
func checkRatios(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	got := eval[struct {
		Range  []float64
		Labels []string
	}](t, b, `allocscope.ratioAxis()`)
	least, most := math.Inf(1), 0.0
	var labels []string
	for _, s := range tr.Simulations {
		if s.Error == "" {
			least, most = min(least, s.ReservedRatio), max(most, s.ReservedRatio)
			labels = append(labels, strconv.FormatFloat(s.ReservedRatio, 'f', 3, 64)+"×")
		}
	}
	span := most - least
	want := []float64{max(0, least-span*0.3), most + span*0.15}
	if len(got.Range) != 2 || math.Abs(got.Range[0]-want[0]) > 1e-9 || math.Abs(got.Range[1]-want[1]) > 1e-9 ||
		got.Range[0] <= 0 || !slices.Equal(got.Labels, labels) {
		t.Errorf("ratio axis %v, labels %q; want %v (above 0) and %q", got.Range, got.Labels, want, labels)
	}
}

// checkAnomalies checks the anomalies' tables: a row per kind that happened, a row per first
// event with its seq, size, address and callsite.
func checkAnomalies(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	got := eval[[][]string](t, b, `Array.from(document.querySelectorAll("#stream-0 table.anomalies tbody tr, #stream-0 table.anomaly-kinds tbody tr"),
		(r) => Array.from(r.cells, (c) => c.textContent))`)
	l := tr.Anomalies.Leaks
	want := [][]string{{"leak (never freed)", render.Count(l.Count), render.Bytes(l.Bytes)}}
	for _, e := range l.Events {
		want = append(want, []string{"leak (never freed)", strconv.FormatUint(e.Seq, 10), "0", "0", e.Function,
			render.Bytes(e.Size), e.Address, e.Callsite})
	}
	if len(l.Events) != 2 || !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("anomalies tables %q, want %q", got, want)
	}
}

// checkStacks hovers a leak's callsite and a live block of the recommended pool's map and checks
// that each shows its callsite's whole stack, every frame the snapshot has, innermost first.
func checkStacks(t *testing.T, b *browserTab, tr *schema.TraceReport) {
	site := tr.Anomalies.Leaks.Events[0].Callsite
	stack := tr.Stacks[site]
	if len(stack) < 10 {
		t.Fatalf("stack of %s has %d frames, want the snapshot's (dozens)", site, len(stack))
	}
	cell := `document.querySelector("#stream-0 table.anomalies td.site")`
	eval[any](t, b, cell+`.scrollIntoView({block: "center"})`)
	p := eval[struct{ X, Y float64 }](t, b, `(() => { const r = `+cell+`.getBoundingClientRect();
		return {X: r.left + 5, Y: r.top + r.height / 2}; })()`)
	b.do(t, chromedp.MouseEvent(chromedp.MouseMoved, p.X, p.Y))
	got := eval[[]string](t, b, `(() => { const tip = document.querySelector(".stack-tip");
		return tip.hidden ? [] : Array.from(tip.children, (c) => c.textContent); })()`)
	want := append([]string{site, fmt.Sprintf("stack (%d frames, innermost first):", len(stack))}, stack...)
	if !slices.Equal(got, want) {
		t.Errorf("hovering %s shows %q, want %q", site, got, want)
	}
	m := tr.Simulations[0].PeakMap
	for j, r := range m.Shown {
		for i, e := range r.Blocks {
			if e.Blocks != 1 || e.LiveBytes == 0 || tr.Stacks[e.Callsite] == nil || e.SizeBytes*50 < r.SizeBytes {
				continue
			}
			eval[any](t, b, fmt.Sprintf(`allocscope.maps[0][0].bars[%d].scrollIntoView({block: "center"})`, j))
			p := eval[struct{ X, Y float64 }](t, b, fmt.Sprintf("allocscope.mapPixel(0, %d, %d)", j, i))
			b.do(t, chromedp.MouseEvent(chromedp.MouseMoved, p.X, p.Y))
			lines := eval[[]string](t, b, `Array.from(document.querySelector('.pmap[data-map="0"] .tip').children, (c) => c.textContent)`)
			s := tr.Stacks[e.Callsite]
			want := append(mapLines(r, e), append([]string{fmt.Sprintf("stack (%d frames, innermost first):", len(s))}, s...)...)
			if !slices.Equal(lines, want) {
				t.Errorf("hovering block %d of region %d shows %q, want %q", i, j, lines, want)
			}
			return
		}
	}
	t.Error("no live block of a callsite with a stack in the recommended pool's map")
}

// TestHTMLTimeAxis loads the report of a 1.7 ms trace and checks that the time axis's labels
// have a unit and the decimals their step needs, distinct from each other: over the whole trace
// in ms, then zoomed to 3 µs past 1 ms in ms with four decimals.
func TestHTMLTimeAxis(t *testing.T) {
	b := newBrowser(t, 1400, 1000)
	events, _ := trainingTrace(1300)
	r := analyzeTrace(t, "short", events)
	page := writePage(t, t.TempDir(), r)
	b.load(t, page)
	span := float64(events[len(events)-1].TimeNs-events[0].TimeNs) / 1e9
	if span < 1.5e-3 || span > 2e-3 {
		t.Fatalf("the trace spans %g s, want about 1.7 ms", span)
	}
	for _, view := range [][2]float64{{0, span}, {span * 0.7, span*0.7 + 3e-6}} {
		zoom(t, b, view[0], view[1])
		got := eval[struct {
			Ticks  []float64
			Labels []string
		}](t, b, `allocscope.timeAxis()`)
		if len(got.Ticks) < 3 || len(got.Labels) != len(got.Ticks) {
			t.Fatalf("view %v: ticks %v, labels %q", view, got.Ticks, got.Labels)
		}
		step := got.Ticks[1] - got.Ticks[0]
		digits := 0
		for math.Abs(step*1e3*math.Pow(10, float64(digits))-math.Round(step*1e3*math.Pow(10, float64(digits)))) > 1e-6 {
			digits++
		}
		var want []string
		for _, v := range got.Ticks {
			want = append(want, strconv.FormatFloat(v*1e3, 'f', digits, 64)+" ms")
		}
		if !slices.Equal(got.Labels, want) || len(slices.Compact(slices.Clone(got.Labels))) != len(got.Labels) {
			t.Errorf("view %v: labels %q, want %q, all distinct", view, got.Labels, want)
		}
	}
	b.check(t, page)
}

// TestHTMLNarrowWindow loads, 1024 pixels wide, a report whose callsite and settings are long
// words (a C++ name without spaces, a long setting) and checks that the page does not scroll
// sideways: the tables wrap or scroll inside their boxes.
func TestHTMLNarrowWindow(t *testing.T) {
	b := newBrowser(t, 1024, 900)
	events, _ := trainingTrace(5000)
	r := analyzeTrace(t, "narrow", events)
	long := strings.Repeat("at::native::templated_kernel<float,4>::", 12) + "run"
	r.Combined.TopCallsites[0].Callsite = long
	r.Combined.Simulations[1].Settings = strings.Repeat("max_split_size_mb:128,", 12) + "expandable_segments:True"
	page := writePage(t, t.TempDir(), r)
	b.load(t, page)
	checkWidth(t, b)
	b.check(t, page)
}
