// Package testcuda builds, once per test binary, what tests need to run programs under allocscope's
// shim without a GPU: the fake CUDA runtime and driver of testdata/fakecuda (libcudart.so,
// libcuda.so.1), the C test programs of testdata/progs and the shim itself (from
// intercept/shim/shim.c, with the flags intercept.BuildShim uses), all with the system C compiler
// ($CC, else cc). It also runs those programs and compares the events they produce with expected
// listings. It imports no allocscope package but trace, so intercept's own tests can use it.
//
// A test binary that uses it calls Cleanup from its TestMain after m.Run, which removes the build
// directory.
package testcuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// shimFileName is the file name of the compiled shim.
const shimFileName = "liballocscope.so"

// envLogDir is the variable that tells the shim where to log (intercept.EnvLogDir).
const envLogDir = "ALLOCSCOPE_LOG_DIR"

// Env is a directory holding the built fake libraries, test programs and shim.
type Env struct {
	// LibDir holds libcuda.so.1 (and the link libcuda.so), libcudart.so and the programs. The
	// programs find the libraries through their run path ($ORIGIN), so no LD_LIBRARY_PATH is needed.
	LibDir string
	// Shim is the shim library compiled from intercept/shim/shim.c.
	Shim  string
	progs map[string]string
}

// unlinked names the programs that reach the fake driver by dlopen only, so that they must not be
// linked with the fake libraries; every other program is linked with -lcudart -lcuda.
var unlinked = map[string]bool{"static_cudart": true, "cupy_style": true}

// startDir is the working directory when the test binary started (tests may t.Chdir later).
var startDir, startDirErr = os.Getwd()

var built struct {
	once sync.Once
	env  *Env
	err  error
}

// Build compiles everything once per test binary (later calls return the same Env) and fails t
// when that cannot be done.
func Build(t testing.TB) *Env {
	t.Helper()
	built.once.Do(func() { built.env, built.err = build() })
	if built.err != nil {
		t.Fatalf("testcuda: building the shim, fake CUDA and test programs: %v", built.err)
	}
	return built.env
}

// Cleanup removes the build directory, if Build made one. Call it from TestMain after m.Run.
func Cleanup() {
	if built.env != nil {
		os.RemoveAll(built.env.LibDir)
	}
}

// Prog returns the path of the program built from testdata/progs/<name>.c. It panics on a name
// that has no source there: that is a mistake in the test, not in the code under test.
func (e *Env) Prog(name string) string {
	p, ok := e.progs[name]
	if !ok {
		panic(fmt.Sprintf("testcuda: no test program %q in testdata/progs", name))
	}
	return p
}

// Programs returns the names of the built programs, sorted.
func (e *Env) Programs() []string {
	names := make([]string, 0, len(e.progs))
	for n := range e.progs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestdataDir returns the repository's testdata directory.
func TestdataDir() (string, error) {
	if startDirErr != nil {
		return "", fmt.Errorf("find testdata: %w", startDirErr)
	}
	for dir := startDir; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/allocscope/allocscope\n") {
			return filepath.Join(dir, "testdata"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find testdata: no allocscope go.mod above %s", startDir)
		}
	}
}

func build() (*Env, error) {
	testdata, err := TestdataDir()
	if err != nil {
		return nil, err
	}
	sources, err := filepath.Glob(filepath.Join(testdata, "progs", "*.c"))
	if err != nil || len(sources) == 0 {
		return nil, fmt.Errorf("no test programs in %s (%v)", filepath.Join(testdata, "progs"), err)
	}
	dir, err := os.MkdirTemp("", "allocscope-testcuda-")
	if err != nil {
		return nil, err
	}
	env := &Env{LibDir: dir, Shim: filepath.Join(dir, shimFileName), progs: map[string]string{}}
	for _, src := range sources {
		name := strings.TrimSuffix(filepath.Base(src), ".c")
		env.progs[name] = filepath.Join(dir, name)
	}
	if err := env.compileAll(testdata); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return env, nil
}

// compileAll builds the shim alongside the fake libraries, then the programs, in parallel.
func (e *Env) compileAll(testdata string) error {
	fake := filepath.Join(testdata, "fakecuda")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	run(func() error {
		src := filepath.Join(testdata, "..", "intercept", "shim", "shim.c")
		return compile("-shared", "-fPIC", "-O2", "-o", e.Shim, src, "-ldl", "-lpthread")
	})
	run(func() error {
		if err := e.compileLibraries(fake); err != nil {
			return err
		}
		for name, out := range e.progs {
			args := []string{"-O2", "-I", fake, "-o", out, filepath.Join(testdata, "progs", name+".c")}
			if !unlinked[name] {
				args = append(args, "-L", e.LibDir, "-lcudart", "-lcuda")
			}
			args = append(args, "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread")
			run(func() error { return compile(args...) })
		}
		return nil
	})
	wg.Wait()
	return errors.Join(errs...)
}

func (e *Env) compileLibraries(fake string) error {
	if err := compile("-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(e.LibDir, "libcuda.so.1"),
		filepath.Join(fake, "driver.c"), "-lpthread"); err != nil {
		return err
	}
	if err := os.Symlink("libcuda.so.1", filepath.Join(e.LibDir, "libcuda.so")); err != nil {
		return err
	}
	return compile("-shared", "-fPIC", "-O2", "-Wl,-soname,libcudart.so", "-Wl,-rpath,$ORIGIN",
		"-o", filepath.Join(e.LibDir, "libcudart.so"), filepath.Join(fake, "runtime.c"), "-ldl", "-lpthread")
}

// compile runs the C compiler ($CC, which may carry flags, else cc) with args.
func compile(args ...string) error {
	cc := strings.Fields(os.Getenv("CC"))
	if len(cc) == 0 {
		cc = []string{"cc"}
	}
	cmd := exec.Command(cc[0], append(cc[1:], args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// Result is what a program run did.
type Result struct {
	Stdout, Stderr string
	ExitCode       int            // -1 when a signal ended it
	Signal         syscall.Signal // the signal that ended it, or 0
}

// Run runs the program name with args and LD_LIBRARY_PATH set to LibDir. With logDir set it runs
// under the shim (LD_PRELOAD) recording into logDir, which must have been prepared with
// intercept.PrepareLogDir; logDir == "" means no shim at all. It fails t when the program cannot
// be started.
func (e *Env) Run(t testing.TB, logDir, name string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(e.Prog(name), args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.LibDir)
	if logDir != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+e.Shim, envLogDir+"="+logDir)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", name, err)
	}
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode(),
		Signal: signalOf(cmd.ProcessState)}
}

// signalOf returns the signal that ended a process, or 0.
func signalOf(ps *os.ProcessState) syscall.Signal {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}
