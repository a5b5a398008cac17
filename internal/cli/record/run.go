package record

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/allocscope/allocscope/intercept"
)

// forwardedSignals are passed on to the traced program.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// runRecord runs the program under the shim, then converts its raw logs.
func runRecord(opt options, args []string, stdout, stderr io.Writer) error {
	start := time.Now()
	if opt.output == "" {
		opt.output = defaultOutput(start)
	}
	if opt.logDir == "" {
		opt.logDir = opt.output + ".raw"
	}
	lib, err := shimPath(opt.shim)
	if err != nil {
		return err
	}
	if strings.ContainsAny(lib, ": ") {
		return fmt.Errorf("shim path %q contains a colon or space, which LD_PRELOAD cannot hold", lib)
	}
	out, err := os.OpenFile(opt.output, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create trace: %w", err)
	}
	defer out.Close()
	if err := intercept.PrepareLogDir(opt.logDir); err != nil {
		return fmt.Errorf("prepare raw log directory: %w", err)
	}
	childStart := time.Now()
	code, runErr := runChild(args, lib, opt.logDir, stderr)
	elapsed := time.Since(childStart)
	if runErr != nil {
		os.Remove(opt.output)
		os.RemoveAll(opt.logDir)
		return runErr
	}
	meta := traceInfo(args, start)
	sum, err := convertDir(opt.logDir, out, meta, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "record: %v\nrecord: raw logs kept in %s; convert them with `record convert %s -o %s`\n",
			err, opt.logDir, opt.logDir, opt.output)
		return exitCodeError{code: firstNonZero(code, 1)}
	}
	if !opt.keepRaw {
		os.RemoveAll(opt.logDir)
	}
	if !opt.quiet {
		printSummary(stderr, sum, elapsed, opt.output)
	}
	return exitCodeError{code: code}
}

func firstNonZero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// runChild starts args with the shim preloaded, forwards signals until it ends and returns its
// exit code (128+N when signal N ended it). An error means the program could not be started.
func runChild(args []string, lib, logDir string, stderr io.Writer) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"LD_PRELOAD="+preloadValue(os.Getenv("LD_PRELOAD"), lib),
		intercept.EnvLogDir+"="+logDir)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", args[0], err)
	}
	done := make(chan struct{})
	go forwardSignals(cmd.Process, sigs, done)
	err := cmd.Wait()
	close(done)
	return exitCode(cmd, err)
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

// exitCode turns the result of Wait into a shell-style exit code.
func exitCode(cmd *exec.Cmd, err error) (int, error) {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, fmt.Errorf("wait for %s: %w", cmd.Path, err)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return cmd.ProcessState.ExitCode(), nil
}
