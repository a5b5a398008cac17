package render_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/synth"
	"github.com/allocscope/allocscope/trace"
)

var (
	figures    = flag.Bool("html.figures", false, "TestHTMLFigures: measure the report's load time and memory in Chromium")
	screenshot = flag.String("html.screenshot", "", "TestHTMLScreenshot: write a screenshot of a report to this PNG file")
	shotTrace  = flag.String("html.trace", "", "TestHTMLScreenshot: the trace to report (default: trainingTrace)")
)

// TestHTMLFigures measures, for synthetic traces of 100,000 and 10 M events, the HTML file's size,
// the time from the start of the navigation to the charts drawn, the page's JavaScript heap and the
// browser's memory, and the median time of a zoom. Run it with -html.figures -v.
func TestHTMLFigures(t *testing.T) {
	if !*figures {
		t.Skip("measures only with -html.figures")
	}
	for _, n := range []uint64{100_000, 10_000_000} {
		t.Run(strconv.FormatUint(n, 10), func(t *testing.T) {
			in := analysis.Input{Name: fmt.Sprintf("synthetic-%d", n),
				Open: func() (analysis.Source, error) { return synth.New(n), nil }}
			start := time.Now()
			r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{Detail: true})
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			page := writePage(t, t.TempDir(), r)
			st, err := os.Stat(page)
			if err != nil {
				t.Fatal(err)
			}
			b := newBrowser(t, 1400, 1000)
			blank := filepath.Join(t.TempDir(), "blank.html")
			if err := os.WriteFile(blank, []byte(`<!DOCTYPE html><title>blank</title><p id="ready">blank`), 0o644); err != nil {
				t.Fatal(err)
			}
			b.do(t, chromedp.Navigate("file://"+blank), chromedp.WaitReady(chromedp.CSS("#ready")))
			base, _ := browserRSS(b.browserPID())
			b.forget()
			b.load(t, page)
			b.check(t, page)
			heap, err := chromedp.Call(b.ctx, runtime.GetHeapUsage, cdp.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			renderer, all := browserRSS(b.browserPID())
			t.Logf("%d events (analyzed in %v): %.2f MiB of HTML, %d points at the finest level; ready %.0f ms after "+
				"navigation start; JS heap %.1f MiB used; renderer RSS %.0f MiB (a blank page's %.0f MiB), all browser "+
				"processes %.0f MiB; zoom %.1f ms (median of 20); memory maps (%d entries) drawn in %.1f ms (median of 20)",
				n, took.Round(time.Millisecond), float64(st.Size())/(1<<20), len(r.Combined.Detail.Levels[0].Points),
				eval[float64](t, b, "allocscope.ready"), heap.UsedSize/(1<<20), renderer/(1<<20), base/(1<<20),
				all/(1<<20), zoomTime(t, b), mapEntries(r.Combined), mapDrawTime(t, b))
		})
	}
}

// zoomTime is the median time, in ms, of 20 zooms to ranges of 1/1 to 1/512 of the timeline,
// each until uPlot has drawn it (it draws in a microtask).
func zoomTime(t *testing.T, b *browserTab) float64 {
	return eval[float64](t, b, `(async () => {
		const s = allocscope.sections[0], [a, z] = s.bounds, times = [];
		for (let i = 0; i < 20; i++) {
			const w = (z - a) / Math.pow(2, i % 10), c = a + (z - a) * ((i * 0.37) % 1), t0 = performance.now();
			s.zoom(c - w / 2, c + w / 2);
			await Promise.resolve();
			times.push(performance.now() - t0);
		}
		times.sort((x, y) => x - y);
		return (times[9] + times[10]) / 2;
	})()`)
}

// mapDrawTime is the median time, in ms, of 20 redraws of the first section's memory maps.
func mapDrawTime(t *testing.T, b *browserTab) float64 {
	return eval[float64](t, b, `(() => {
		const times = [];
		for (let i = 0; i < 20; i++) {
			const t0 = performance.now();
			allocscope.maps[0].forEach((m) => m.draw());
			times.push(performance.now() - t0);
		}
		times.sort((x, y) => x - y);
		return (times[9] + times[10]) / 2;
	})()`)
}

// mapEntries counts the entries of a report's memory maps.
func mapEntries(tr *schema.TraceReport) int {
	n := 0
	for _, s := range tr.Simulations {
		if s.PeakMap != nil {
			for _, r := range s.PeakMap.Shown {
				n += len(r.Blocks)
			}
		}
	}
	return n
}

// browserRSS returns the resident memory of the renderer processes among pid's descendants and
// of pid with all its descendants, in bytes (from /proc).
func browserRSS(pid int) (renderer, all float64) {
	parents := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // state, ppid, ...
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		pp, _ := strconv.Atoi(f[1])
		parents[pp] = append(parents[pp], p)
	}
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], parents[p]...)
		rss := statusKiB(p, "VmRSS:") * 1024
		all += rss
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.Contains(string(cmd), "--type=renderer") {
			renderer += rss
		}
	}
	return renderer, all
}

// statusKiB reads a field in kB of /proc/pid/status.
func statusKiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			v, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return v
		}
	}
	return 0
}

// TestHTMLScreenshot writes a screenshot of the report of -html.trace (or of trainingTrace) with
// the tooltip of the peak shown, for docs/html-report.png.
func TestHTMLScreenshot(t *testing.T) {
	if *screenshot == "" {
		t.Skip("writes a screenshot only with -html.screenshot FILE")
	}
	in := analysis.Input{Name: "train"}
	if *shotTrace != "" {
		in = analysis.Input{Name: filepath.Base(*shotTrace), Open: func() (analysis.Source, error) { return trace.Open(*shotTrace) }}
	} else {
		events, _ := trainingTrace(100_000)
		in.Open = func() (analysis.Source, error) { return &namedSource{events: events}, nil }
	}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{Detail: true})
	if err != nil {
		t.Fatal(err)
	}
	page := writePage(t, t.TempDir(), r)
	b := newBrowser(t, 1280, 900)
	b.load(t, page)
	peak := r.Combined.Requests.PeakSeq
	i := -1
	for j, e := range r.Combined.Detail.Events {
		if e.Seq == peak {
			i = j
		}
	}
	if i >= 0 {
		hover(t, b, i)
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	b.check(t, page)
}
