package render_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds a Chromium or Chrome: $ALLOCSCOPE_CHROMIUM, else the usual names on $PATH.
func chromiumPath() string {
	if p := os.Getenv("ALLOCSCOPE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserTab is a tab of a headless Chromium started for one test, with what the page reported.
type browserTab struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string // console errors and warnings, exceptions, log errors
	requests []string // URLs requested
}

// newBrowser starts headless Chromium with a fresh profile and no network activity of its own, or
// skips the test when there is none.
func newBrowser(t testing.TB, width, height int) *browserTab {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("no Chromium found (install it, e.g. apt-get install chromium, or set ALLOCSCOPE_CHROMIUM): " +
			"the HTML report's browser tests need one")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browserTab{ctx: ctx}
	if err := chromedp.Listen(ctx, b.listen); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return b
}

func (b *browserTab) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		if d.Exception != nil {
			d.Text += " " + d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, d.Text))
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
		}
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
			b.problems = append(b.problems, fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	}
}

// load opens the page in file and waits until its script says the charts are drawn.
func (b *browserTab) load(t testing.TB, file string) {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate("file://"+abs),
		chromedp.WaitReady(chromedp.CSS(`html[data-ready="1"]`))); err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
}

// forget drops what pages loaded before reported.
func (b *browserTab) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems, b.requests = nil, nil
}

// check fails the test on any console error, warning or exception, and on any request but the page's own.
func (b *browserTab) check(t testing.TB, page string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("page problem: %s", p)
	}
	abs, _ := filepath.Abs(page)
	for _, u := range b.requests {
		if u != "file://"+abs {
			t.Errorf("page requested %s", u)
		}
	}
}

// eval evaluates a JavaScript expression of the page.
func eval[T any](t testing.TB, b *browserTab, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// do runs chromedp actions.
func (b *browserTab) do(t testing.TB, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// browserPID is the process id of the tab's browser.
func (b *browserTab) browserPID() int {
	if c := chromedp.FromContext(b.ctx); c != nil && c.Browser != nil {
		if p := c.Browser.Process(); p != nil {
			return p.Pid
		}
	}
	return 0
}
