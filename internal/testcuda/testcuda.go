// Package testcuda builds, once per test binary, what tests need to run programs under allocscope's
// shim without a GPU: the fake CUDA runtime and driver of testdata/fakecuda (libcudart.so,
// libcuda.so.1, and a variant of the driver in exported/libcuda.so.1), the C test programs of
// testdata/progs, the preloadable libraries of testdata/preload and the shim itself (from
// the units internal/intercept/shim/BUILD lists, with its flags, as intercept.BuildShim does), all with the system C compiler
// ($CC, else cc). It also runs those programs and compares the events they produce with expected
// listings. For the tests that run on a real GPU (build tag cuda) it opens the device
// (OpenDevice0). It imports no allocscope package but trace and internal/shimbuild, so intercept's
// own tests and the CUDA backend's can use it.
//
// A test binary that uses it calls Cleanup from its TestMain after m.Run, which removes the build
// directory.
package testcuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/allocscope/allocscope/internal/shimbuild"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	// Shim is the shim library compiled as internal/intercept/shim/BUILD says.
	Shim string
	// ExportedDriver is a variant of the fake driver (driver.c built with -DFAKE_PROC_EXPORTED, so
	// without -Bsymbolic and with a cuGetProcAddress that hands out the library's own exported
	// functions, as their addresses resolve through the dynamic linker). It lives in a directory of
	// its own (LibDir/exported/libcuda.so.1) and is meant to be dlopen'ed by path.
	ExportedDriver string
	progs          map[string]string
	preloads       map[string]string
}

// unlinked names the programs that reach the fake driver by dlopen only, so that they must not be
// linked with the fake libraries; every other program is linked with -lcudart -lcuda.
var unlinked = map[string]bool{"static_cudart": true, "cupy_style": true, "gpa_local": true}

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

// Preload returns the path of the shared library built from testdata/preload/<name>.c
// (LibDir/lib<name>.so). It panics on a name that has no source there.
func (e *Env) Preload(name string) string {
	p, ok := e.preloads[name]
	if !ok {
		panic(fmt.Sprintf("testcuda: no preload library %q in testdata/preload", name))
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
	env := &Env{LibDir: dir, Shim: filepath.Join(dir, shimFileName),
		ExportedDriver: filepath.Join(dir, "exported", "libcuda.so.1"),
		progs:          map[string]string{}, preloads: map[string]string{}}
	for _, src := range sources {
		name := strings.TrimSuffix(filepath.Base(src), ".c")
		env.progs[name] = filepath.Join(dir, name)
	}
	preloads, err := filepath.Glob(filepath.Join(testdata, "preload", "*.c"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, src := range preloads {
		name := strings.TrimSuffix(filepath.Base(src), ".c")
		env.preloads[name] = filepath.Join(dir, "lib"+name+".so")
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
		root := filepath.Join(testdata, "..", "internal", "intercept")
		b, err := os.ReadFile(filepath.Join(root, "shim", "BUILD"))
		if err != nil {
			return err
		}
		recipe, err := shimbuild.Parse(b)
		if err != nil {
			return err
		}
		return compile(recipe.Args(root, e.Shim)...)
	})
	for name, out := range e.preloads {
		src := filepath.Join(testdata, "preload", name+".c")
		run(func() error {
			return compile("-shared", "-fPIC", "-O2", "-I", fake, "-o", out, src, "-ldl", "-lpthread")
		})
	}
	run(func() error {
		if err := os.MkdirAll(filepath.Dir(e.ExportedDriver), 0o755); err != nil {
			return err
		}
		return compile("-shared", "-fPIC", "-O2", "-DFAKE_PROC_EXPORTED", "-Wl,-soname,libcuda.so.1",
			"-o", e.ExportedDriver, filepath.Join(fake, "driver.c"), "-lpthread")
	})
	run(func() error {
		if err := e.compileLibraries(fake); err != nil {
			return err
		}
		for name, out := range e.progs {
			args := []string{"-O2", "-g", "-I", fake, "-o", out, filepath.Join(testdata, "progs", name+".c")}
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

// RunTimeout is how long RunWith lets a program run when its context has no deadline of its own.
const RunTimeout = 60 * time.Second

// RunWith runs the program name (a name of testdata/progs, or a path when it contains a slash)
// with args, LD_LIBRARY_PATH set to LibDir, LD_PRELOAD set to the preload libraries in that order
// (none: no LD_PRELOAD at all; pass e.Shim among them to record), ALLOCSCOPE_LOG_DIR set to logDir
// when it is not empty, and the extra "KEY=value" variables of env last. The program runs in a
// process group of its own; when ctx ends (or after RunTimeout without a deadline) the whole group is
// killed and t fails with what the program wrote so far, so a hang fails the test instead of
// stalling go test. It also fails t when the program cannot be started.
func (e *Env) RunWith(t testing.TB, ctx context.Context, logDir string, preload, env []string, name string,
	args ...string) Result {
	t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RunTimeout)
		defer cancel()
	}
	path := name
	if !strings.Contains(name, "/") {
		path = e.Prog(name)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.LibDir)
	if len(preload) > 0 {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+strings.Join(preload, ":"))
	}
	if logDir != "" {
		cmd.Env = append(cmd.Env, envLogDir+"="+logDir)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // output pipes held open by an escaped descendant
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q: no end after %v (hang or deadlock?), killed: %v\nstdout:\n%s\nstderr:\n%s", name, args,
			time.Since(start).Round(time.Millisecond), err, tail(stdout.String()), tail(stderr.String()))
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", name, err)
	}
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode(),
		Signal: signalOf(cmd.ProcessState)}
}

// tail returns at most the last 2000 bytes of s.
func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
