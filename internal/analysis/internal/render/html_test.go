package render_test

import (
	"bytes"
	"cmp"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/analysis/internal/render"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

// siteNames are the callsites of trainingTrace; one has characters that HTML must escape.
var siteNames = []string{"forward (model.py:41)", "backward (model.py:88)", "optimizer.step (optim.py:12)",
	"attention <b>q&k</b> (attn.py:7)", "cache.grow (kv.py:30)"}

// namedSource serves events from memory and names their callsites, as a trace with symbols does.
type namedSource struct {
	events []trace.Event
	pos    int
}

func (s *namedSource) Next() ([]trace.Event, error) {
	if s.pos >= len(s.events) {
		return nil, io.EOF
	}
	end := min(s.pos+4096, len(s.events))
	b := s.events[s.pos:end]
	s.pos = end
	return b, nil
}

func (s *namedSource) Callsite(_ uint32, id uint64) (trace.Callsite, bool) {
	if i := int(id-0x1000) / 0x10; id >= 0x1000 && i < len(siteNames) {
		return trace.Callsite{Label: siteNames[i]}, true
	}
	return trace.Callsite{}, false
}

// request is what trainingTrace knows of one of its events: the block's size, the name of the
// callsite that allocated it and its lifetime (-1 when never freed).
type request struct {
	size     uint64
	site     string
	lifetime int64
}

// trainingTrace is n requests of a training-like loop on two streams: tensors allocated and freed
// at random around a number of live blocks that rises and falls every 20,000 requests, and a cache
// that grows now and then. It returns the events and what each one did, by seq.
func trainingTrace(n int) ([]trace.Event, map[uint64]*request) {
	sizes := []uint64{4096, 65536, 1 << 20, 3 << 20, 8 << 20}
	type block struct {
		addr, seq uint64
		time      int64
	}
	var live []block
	events := make([]trace.Event, 0, n)
	reqs := map[uint64]*request{}
	rng, addr, now := uint64(0x9e3779b97f4a7c15), uint64(0x7f0000000000), int64(0)
	for seq := uint64(1); len(events) < n; seq++ {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		now += 1000 + int64(rng%7)*100
		e := trace.Event{Seq: seq, TimeNs: now, PID: 100, Stream: 7 + (seq/5000)%2, DurationNs: 2000}
		target := 300 + 250*math.Sin(2*math.Pi*float64(seq)/20000) + float64(seq)/1000
		if len(live) > 0 && float64(rng%1000) < 500+200*math.Tanh((float64(len(live))-target)/50) {
			i := int(rng>>8) % len(live)
			b := live[i]
			live = slices.Delete(live, i, i+1)
			e.Op, e.Function, e.Address = trace.OpFree, "cudaFree", b.addr
			alloc := reqs[b.seq]
			alloc.lifetime = now - b.time
			reqs[seq] = alloc
		} else {
			site := (rng >> 20) % 4
			if rng%997 == 0 {
				site = 4 // the cache: never freed
			}
			addr += 16 << 20
			e.Op, e.Function, e.Address, e.Size, e.Callsite = trace.OpAlloc, "cudaMalloc", addr,
				sizes[(rng>>32)%uint64(len(sizes))], 0x1000+site*0x10
			reqs[seq] = &request{size: e.Size, site: siteNames[site], lifetime: -1}
			if site != 4 {
				live = append(live, block{addr, seq, now})
			}
		}
		events = append(events, e)
	}
	return events, reqs
}

// analyzeTrace analyzes events with the HTML report's detail.
func analyzeTrace(t testing.TB, name string, events []trace.Event) *schema.Report {
	t.Helper()
	in := analysis.Input{Name: name, Open: func() (analysis.Source, error) { return &namedSource{events: events}, nil }}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{Detail: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writePage writes the HTML report of r into dir and returns its path.
func writePage(t testing.TB, dir string, r *schema.Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := render.HTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// expectedView is the level and the number of points in [a, b] (seconds from the first event) the
// page should draw: the finest level with at most render.PointBudget points in range, else the
// coarsest (the rule of report.js, computed here from the same detail).
func expectedView(d *schema.Detail, first int64, a, b float64) (level, points int) {
	for l, lv := range d.Levels {
		secs := func(i int) float64 { return float64(d.Events[lv.Points[i]].TimeNs-first) / 1e9 }
		lo := searchFirst(len(lv.Points), func(i int) bool { return secs(i) >= a })
		hi := searchFirst(len(lv.Points), func(i int) bool { return secs(i) > b })
		if hi-lo <= render.PointBudget || l == len(d.Levels)-1 {
			return l, hi - lo
		}
	}
	return -1, 0
}

// searchFirst returns the first i in [0, n) for which f is true (f is false, then true), else n.
func searchFirst(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi) / 2
		if f(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// sortedPolicies is the what-if table's policy names after sorting by key, ascending or not:
// a stable sort, rows without a key (errors) last.
func sortedPolicies(sims []schema.Simulation, key func(schema.Simulation) float64, asc bool) []string {
	rows := slices.Clone(sims)
	slices.SortStableFunc(rows, func(x, y schema.Simulation) int {
		if (x.Error != "") != (y.Error != "") {
			return map[bool]int{true: 1, false: -1}[x.Error != ""]
		}
		c := cmp.Compare(key(x), key(y))
		if !asc {
			c = -c
		}
		return c
	})
	var names []string
	for _, s := range rows {
		names = append(names, s.Name)
	}
	return names
}

func TestHTMLPageContents(t *testing.T) {
	events, _ := trainingTrace(5000)
	r := analyzeTrace(t, "train", events)
	var page bytes.Buffer
	if err := render.HTML(&page, r); err != nil {
		t.Fatal(err)
	}
	s := page.String()
	for _, want := range []string{`<section class="stream" id="stream-0">`, `"events":true`,
		"attention \\u003cb\\u003eq\\u0026k\\u003c/b\\u003e (attn.py:7)", "<summary>Text report</summary>",
		`<table class="sortable whatif">`, "Copyright (c) 2022 Leon Sorokin", "<h3>Memory map at the peak</h3>",
		`<h4>recommended (`, `<h4>pytorch (defaults)</h4>`, `<canvas class="pm-bar" data-region="0" style="width: 100.000%">`} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(s, "<b>q&k</b>") {
		t.Error("a callsite name reaches the page unescaped")
	}
}

// TestHTMLFragmentedSegments checks the map of the segments an out-of-memory found fragmented: a
// bar per segment with its blocks in use, its largest free block and the rest free, and the blocks
// that pin it.
func TestHTMLFragmentedSegments(t *testing.T) {
	events, _ := trainingTrace(2000)
	r := analyzeTrace(t, "train", events)
	r.Combined.OOM = &schema.OOMReport{Fragmented: []schema.FragmentedSegment{{Address: "0x7f00", SizeBytes: 20 << 20,
		FreeBytes: 15 << 20, LargestFree: 10 << 20, PinnedBy: []schema.PinningBlock{{SizeBytes: 4 << 20, Callsite: "fwd <x>"},
			{SizeBytes: 1 << 20, Callsite: "bwd"}}, PinnedBlocks: 2}}}
	var page bytes.Buffer
	if err := render.HTML(&page, r); err != nil {
		t.Fatal(err)
	}
	want := `<tr><td>0x7f00</td><td data-v="20971520">20 MiB</td><td data-v="15728640">15 MiB</td>` +
		`<td data-v="10485760">10 MiB</td><td class="l"><div class="seg-bar"><span class="seg-used" style="width: 25.000%"></span>` +
		`<span class="seg-largest" style="width: 50.000%"></span><span class="seg-free" style="width: 25.000%"></span></div></td>` +
		`<td class="l">4 MiB by fwd &lt;x&gt;; 1 MiB by bwd</td></tr>`
	if !strings.Contains(page.String(), want) {
		t.Errorf("page lacks the segment's row %s", want)
	}
}

// TestHTMLSavedColumn: the what-if table's "time saved" column says what the text report says: n/a
// for every policy of a snapshot (no call durations), never a 0.
func TestHTMLSavedColumn(t *testing.T) {
	path := filepath.Join("..", "..", "..", "..", "testdata", "trace", "snapshot_small.pickle")
	in := analysis.Input{Name: "snap", Open: func() (analysis.Source, error) { return trace.Open(path) }}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := render.HTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	start := strings.Index(page, `<table class="sortable whatif">`)
	table := page[start : start+strings.Index(page[start:], "</table>")]
	sims := len(r.Combined.Simulations)
	if n := strings.Count(table, `<td data-v="">n/a</td>`); sims == 0 || n != sims || strings.Contains(table, " ns<") {
		t.Errorf("%d n/a cells for %d policies in\n%s", n, sims, table)
	}
}
