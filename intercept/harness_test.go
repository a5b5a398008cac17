package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// built holds what the first test that needs them compiled: the shim, the fake CUDA libraries and the
// test programs (built lazily, so that fuzz workers and reader-only tests start at once).
var built struct {
	once sync.Once
	dir  string // everything lives here; the fake libraries are on LD_LIBRARY_PATH
	shim string
	err  error
}

var programs = map[string]bool{ // name -> links the fake libraries
	"plain": true, "threads": true, "forkexec": true, "killed": true, "bench": true,
	"static_cudart": false, "cupy_style": false,
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func cc() string {
	if c := os.Getenv("CC"); c != "" {
		return c
	}
	return "cc"
}

func compile(args ...string) error {
	fields := strings.Fields(cc())
	cmd := exec.Command(fields[0], append(fields[1:], args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// buildAll compiles the shim, the fake libraries, then the programs, in parallel where it can.
func buildAll(dir string) error {
	fake := filepath.Join("..", "testdata", "fakecuda")
	progs := filepath.Join("..", "testdata", "progs")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	built.shim = filepath.Join(dir, ShimFileName)
	run(func() error { return BuildShim(built.shim) })
	run(func() error {
		err := compile("-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(dir, "libcuda.so.1"),
			filepath.Join(fake, "driver.c"), "-lpthread")
		if err == nil {
			err = os.Symlink("libcuda.so.1", filepath.Join(dir, "libcuda.so"))
		}
		if err == nil {
			err = compile("-shared", "-fPIC", "-O2", "-Wl,-soname,libcudart.so", "-o", filepath.Join(dir, "libcudart.so"),
				filepath.Join(fake, "runtime.c"), "-ldl", "-lpthread")
		}
		if err != nil {
			return err
		}
		for name, linked := range programs {
			args := []string{"-O2", "-I", fake, "-o", filepath.Join(dir, name), filepath.Join(progs, name+".c")}
			if linked {
				args = append(args, "-L", dir, "-lcudart", "-lcuda")
			}
			args = append(args, "-ldl", "-lpthread")
			run(func() error { return compile(args...) })
		}
		return nil
	})
	wg.Wait()
	return errors.Join(errs...)
}

func needBuilt(t testing.TB) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "allocscope-intercept-test-")
		if built.err == nil {
			built.err = buildAll(built.dir)
		}
	})
	if built.err != nil {
		t.Fatalf("building the shim, fake CUDA and test programs: %v", built.err)
	}
}

// result is what a program run did.
type result struct {
	stdout, stderr string
	exitCode       int            // -1 when killed by a signal
	signal         syscall.Signal // the signal that killed it, or 0
}

// runProgram runs a test program against the fake CUDA; with logDir set, under the shim recording into
// logDir (logDir == "" means no shim at all).
func runProgram(t testing.TB, logDir, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(built.dir, name), args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+built.dir)
	if logDir != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+built.shim, EnvLogDir+"="+logDir)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", name, err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), exitCode: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.signal = ws.Signal()
	}
	return r
}

// record runs name twice, without and with the shim, checks that the program behaved the same, and
// returns the run under the shim and its log directory.
func record(t *testing.T, name string, args ...string) (result, string) {
	t.Helper()
	needBuilt(t)
	base := runProgram(t, "", name, args...)
	logDir := filepath.Join(t.TempDir(), "logs")
	if err := PrepareLogDir(logDir); err != nil {
		t.Fatal(err)
	}
	got := runProgram(t, logDir, name, args...)
	if got.stdout != base.stdout {
		t.Errorf("%s: stdout under the shim differs:\n--- without\n%s--- with\n%s", name, base.stdout, got.stdout)
	}
	if got.exitCode != base.exitCode || got.signal != base.signal {
		t.Errorf("%s: exit %d signal %v under the shim, %d %v without", name, got.exitCode, got.signal, base.exitCode, base.signal)
	}
	if got.stderr != base.stderr {
		t.Errorf("%s: stderr under the shim differs:\n--- without\n%s--- with\n%s", name, base.stderr, got.stderr)
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

// render prints the fields of an event a scenario asserts, one line per event.
func render(e *trace.Event) string {
	s := fmt.Sprintf("%s %s %s %s size=%d addr=%#x result=%d dev=%d", e.Function, e.Op, e.Memory, e.Layer,
		e.Size, e.Address, e.Result, e.Device)
	if e.Stream != 0 {
		s += fmt.Sprintf(" stream=%#x", e.Stream)
	}
	if e.Handle != 0 {
		s += fmt.Sprintf(" handle=%#x", e.Handle)
	}
	return s
}

// checkEvents compares rendered events with want (lines; blank lines and surrounding space ignored).
func checkEvents(t *testing.T, events []trace.Event, want string) {
	t.Helper()
	var wantLines []string
	for _, l := range strings.Split(want, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			wantLines = append(wantLines, l)
		}
	}
	var got []string
	for i := range events {
		got = append(got, render(&events[i]))
	}
	if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("events differ:\n--- got\n%s\n--- want\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
}

// checkSeqs asserts that the events carry exactly the seqs first..first+len-1, in order.
func checkSeqs(t *testing.T, events []trace.Event, first uint64) {
	t.Helper()
	for i := range events {
		if events[i].Seq != first+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, events[i].Seq, first+uint64(i))
		}
	}
}
