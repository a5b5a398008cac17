package intercept

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/trace"
)

// The shim, the fake CUDA libraries and the test programs come from internal/testcuda, built once
// for the whole test binary by the first test that needs them.

func TestMain(m *testing.M) {
	code := m.Run()
	testcuda.Cleanup()
	for _, p := range cpoolDrivers.paths {
		os.RemoveAll(filepath.Dir(p))
	}
	os.Exit(code)
}

// result is what a program run did.
type result = testcuda.Result

// env returns the built shim, fake libraries and programs.
func env(t testing.TB) *testcuda.Env {
	t.Helper()
	return testcuda.Build(t)
}

// runProgram runs a test program against the fake CUDA; with logDir set, under the shim recording into
// logDir (logDir == "" means no shim at all).
func runProgram(t testing.TB, logDir, name string, args ...string) result {
	t.Helper()
	return env(t).Run(t, logDir, name, args...)
}

// record runs name twice, without and with the shim, checks that the program behaved the same, and
// returns the run under the shim and its log directory.
func record(t *testing.T, name string, args ...string) (result, string) {
	t.Helper()
	base := runProgram(t, "", name, args...)
	logDir := filepath.Join(t.TempDir(), "logs")
	if err := PrepareLogDir(logDir); err != nil {
		t.Fatal(err)
	}
	got := runProgram(t, logDir, name, args...)
	if got.Stdout != base.Stdout {
		t.Errorf("%s: stdout under the shim differs:\n--- without\n%s--- with\n%s", name, base.Stdout, got.Stdout)
	}
	if got.ExitCode != base.ExitCode || got.Signal != base.Signal {
		t.Errorf("%s: exit %d signal %v under the shim, %d %v without", name, got.ExitCode, got.Signal, base.ExitCode, base.Signal)
	}
	if got.Stderr != base.Stderr {
		t.Errorf("%s: stderr under the shim differs:\n--- without\n%s--- with\n%s", name, base.Stderr, got.Stderr)
	}
	return got, logDir
}

// eventList is an eventSink that keeps everything.
type eventList []trace.Event

func (l *eventList) Write(e *trace.Event) error {
	*l = append(*l, *e)
	return nil
}

// convertDir converts a log directory into memory.
func convertDir(t testing.TB, dir string) ([]trace.Event, Summary) {
	t.Helper()
	var events eventList
	sum, err := convert(dir, &events, ConvertOptions{})
	if err != nil {
		t.Fatalf("convert %s: %v", dir, err)
	}
	if sum.Events != int64(len(events)) {
		t.Errorf("summary says %d events, sink got %d", sum.Events, len(events))
	}
	return events, sum
}

// checkEvents compares the rendered events with want (see testcuda.CheckEvents).
func checkEvents(t *testing.T, events []trace.Event, want string) {
	t.Helper()
	testcuda.CheckEvents(t, events, want)
}

// checkSeqs asserts that the events carry exactly the seqs first..first+len-1, in order.
func checkSeqs(t *testing.T, events []trace.Event, first uint64) {
	t.Helper()
	testcuda.CheckSeqs(t, events, first)
}
