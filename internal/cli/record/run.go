package record

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/pool"
)

// forwardedSignals are passed on to the traced program.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// runRecord runs the program under the shim, then converts its raw logs. Nothing is run when the
// program, the shim, the trace file or the raw log directory is unusable. With -q it prints only
// errors and warnings.
func runRecord(opt options, args []string, stdout, stderr io.Writer) error {
	if opt.wait < 0 {
		return command.Usagef("--wait: %s is negative (0: do not wait)", opt.wait)
	}
	start := time.Now()
	if opt.output == "" {
		opt.output = defaultOutput(start)
	}
	if opt.logDir == "" {
		opt.logDir = opt.output + ".raw"
	}
	if opt.pool != "" {
		spec, err := poolSpec(opt.pool)
		if err != nil {
			return err
		}
		opt.spec = spec
	}
	lib, created, err := prepareRun(opt, args)
	if err != nil {
		return err
	}
	notice := stderr
	if opt.quiet {
		notice = io.Discard
	}
	if !opt.noFramework {
		if opt.pythonHook, err = preparePythonHook(); err != nil {
			removeRawLogs(opt.logDir, created)
			return err
		}
		defer os.RemoveAll(opt.pythonHook)
	}
	childStart := time.Now()
	code, runErr := runProgram(opt, args, lib, stdout, stderr, notice)
	elapsed := time.Since(childStart)
	if runErr != nil {
		removeRawLogs(opt.logDir, created)
		return runErr
	}
	sum, err := writeTrace(opt.logDir, opt.output, traceInfo(args, start), notice)
	if err != nil {
		fmt.Fprintf(stderr, "record: %v\nrecord: raw logs kept in %s; convert them with `record convert %s -o %s`\n",
			err, opt.logDir, opt.logDir, opt.output)
		return command.ExitCode(firstNonZero(code, 1))
	}
	if !opt.keepRaw {
		removeRawLogs(opt.logDir, created)
	}
	printSummary(stderr, sum, elapsed, opt.output, opt.quiet)
	return command.ExitCode(code)
}

// poolSpec reads the pool.json of --pool and encodes it for the shim, refusing what the pool inside
// the program does not implement.
func poolSpec(path string) (string, error) {
	cfg, err := pool.LoadConfig(path)
	if err != nil {
		return "", fmt.Errorf("--pool: %w", err)
	}
	spec, err := intercept.PoolSpec(cfg)
	if err != nil {
		return "", fmt.Errorf("--pool %s: %w", path, err)
	}
	return spec, nil
}

// prepareRun checks the program, the shim and the trace file, and prepares the raw log directory. It
// returns the shim to preload and whether the directory was created (see prepareLogDir).
func prepareRun(opt options, args []string) (lib string, created bool, err error) {
	if _, err := exec.LookPath(args[0]); err != nil {
		return "", false, fmt.Errorf("program %s: %w", args[0], lookPathCause(err))
	}
	lib, err = shimPath(opt.shim)
	if err != nil {
		return "", false, err
	}
	if strings.ContainsAny(lib, ": ") {
		return "", false, fmt.Errorf("shim path %q contains a colon or space, which LD_PRELOAD cannot hold", lib)
	}
	if err := checkTraceOutput(opt.output); err != nil {
		return "", false, err
	}
	created, err = prepareLogDir(opt.logDir)
	return lib, created, err
}

// runProgram runs the program (runChild), then waits up to opt.wait for the processes it started
// that still hold a raw log. A SIGINT or SIGTERM that reaches record during that wait ends it; one
// that arrives while the program runs is only forwarded to it.
func runProgram(opt options, args []string, lib string, stdout, stderr, notice io.Writer) (int, error) {
	// Caught from before the start, so that none arriving after the program ended kills record
	// before it converts.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	code, err := runChild(args, lib, opt, stdout, stderr)
	if err != nil || opt.wait <= 0 {
		return code, err
	}
	for len(sigs) > 0 {
		<-sigs // sent while the program ran, and forwarded to it
	}
	stop, done := make(chan struct{}), make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			close(stop)
		case <-done:
		}
	}()
	waitForLogs(opt.logDir, opt.wait, stop, notice, stderr)
	return code, nil
}

// lookPathCause strips what exec.LookPath repeats of the program's name from its error:
// "no such file or directory", "permission denied", "executable file not found in $PATH".
func lookPathCause(err error) error {
	var execErr *exec.Error
	if errors.As(err, &execErr) {
		err = execErr.Err
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		err = pathErr.Err
	}
	return err
}

func firstNonZero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// prepareLogDir makes the raw log directory and its sequence counter. It refuses a directory that
// already holds raw logs, which would be merged into this trace. created reports whether the
// directory was made here (and so may be removed afterwards).
func prepareLogDir(dir string) (created bool, err error) {
	_, statErr := os.Stat(dir)
	created = errors.Is(statErr, fs.ErrNotExist)
	old, _ := filepath.Glob(filepath.Join(dir, "*.alog"))
	for _, pattern := range frameworkFiles {
		more, _ := filepath.Glob(filepath.Join(dir, pattern))
		old = append(old, more...)
	}
	if len(old) > 0 {
		return false, fmt.Errorf("raw log directory %s already holds %d raw log(s) of an earlier run: "+
			"convert them with `record convert %s` (which removes them once converted) or remove them", dir, len(old), dir)
	}
	if err := intercept.PrepareLogDir(dir); err != nil {
		return false, fmt.Errorf("prepare raw log directory: %w", err)
	}
	return created, nil
}

// removeRawLogs deletes what the recording wrote into dir (the sequence counter, raw logs and
// lanes, module maps), and dir itself when it was created for the recording and nothing else is in it.
func removeRawLogs(dir string, created bool) {
	for _, pattern := range append([]string{"control", "*.alog", "*.lanes", "*.maps", "*.maps.tmp"}, frameworkFiles...) {
		paths, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, p := range paths {
			os.Remove(p)
		}
	}
	if created {
		os.Remove(dir)
	}
}

// runChild starts args with the shim preloaded, its output going to stdout and stderr, forwards
// signals until it ends and returns its exit code (128+N when signal N ended it). An error means the
// program could not be started.
func runChild(args []string, lib string, opt options, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	logDir, err := filepath.Abs(opt.logDir) // the program and its children may change directory
	if err != nil {
		return 0, fmt.Errorf("log directory %s: %w", opt.logDir, err)
	}
	cmd.Env = append(os.Environ(),
		"LD_PRELOAD="+preloadValue(os.Getenv("LD_PRELOAD"), lib),
		intercept.EnvLogDir+"="+logDir)
	if opt.spec != "" {
		cmd.Env = append(cmd.Env, intercept.EnvPool+"="+opt.spec)
	}
	if opt.pythonHook != "" {
		cmd.Env = append(cmd.Env, envPythonPath+"="+pythonPathValue(os.Getenv(envPythonPath), opt.pythonHook))
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", args[0], err)
	}
	done := make(chan struct{})
	go forwardSignals(cmd.Process, sigs, done)
	err = cmd.Wait()
	close(done)
	if cmd.ProcessState == nil {
		return 0, fmt.Errorf("wait for %s: %w", args[0], err)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		// The program ran (copying its output failed): its raw logs are still converted.
		fmt.Fprintf(stderr, "record: warning: %s: %v\n", args[0], err)
	}
	return exitCode(cmd.ProcessState), nil
}

// forwardSignals passes each signal on to p until done is closed. SIGINT and SIGQUIT typed at the
// terminal already reach the whole foreground process group, the program included; they are not sent
// twice when record itself is that foreground group.
func forwardSignals(p *os.Process, sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			if (s == syscall.SIGINT || s == syscall.SIGQUIT) && inForegroundOfTerminal() {
				continue
			}
			_ = p.Signal(s)
		}
	}
}

// inForegroundOfTerminal reports whether this process's group is the foreground group of the
// terminal on stdin.
func inForegroundOfTerminal() bool {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return false
	}
	fg, err := unixTcgetpgrp(fd)
	return err == nil && fg == syscall.Getpgrp()
}

// exitCode turns the state of an ended process into a shell-style exit code.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
