package record

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/intercept"
)

// The test binary plays two more parts (see TestMain), so that these tests need neither the shim
// nor any tool:
//
//   - with envHoldLog=DIR it is a "holder": it creates DIR/<its pid>-1.alog, holds a shared flock on
//     it as the shim does, prints "locked", waits envHoldFor (a duration, or holdUntilEOF: until its
//     stdin is closed), creates the file envHoldDone names when set, removes the log and exits 0;
//   - with envSpawnHolder=N it is a program that starts a holder in $ALLOCSCOPE_LOG_DIR, prints
//     "holder <pid>" once the holder holds its log, and exits with N at once, leaving it running.
//
// A holder's command line is holderArgs.
const (
	envHoldLog     = "ALLOCSCOPE_TEST_HOLD_LOG"
	envHoldFor     = "ALLOCSCOPE_TEST_HOLD_FOR"
	envHoldDone    = "ALLOCSCOPE_TEST_HOLD_DONE"
	envSpawnHolder = "ALLOCSCOPE_TEST_SPAWN_HOLDER"
)

// holdUntilEOF as envHoldFor makes a holder hold its log until its stdin is closed.
const holdUntilEOF = "eof"

var holderArgs = []string{"allocscope-test-holder", "worker.py", "--a-long-option-to-cut"}

// holderCommand is what the waiting line shows of holderArgs: its first 37 characters and "...".
const holderCommand = "allocscope-test-holder worker.py --a-..."

// holdLog is the holder's main; it returns the exit code.
func holdLog() int {
	hold := os.Getenv(envHoldFor)
	d, err := time.ParseDuration(hold)
	if err != nil && hold != holdUntilEOF {
		return 2
	}
	path := filepath.Join(os.Getenv(envHoldLog), strconv.Itoa(os.Getpid())+"-1.alog")
	f, err := os.Create(path)
	if err != nil {
		return 2
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		return 2
	}
	os.Stdout.WriteString("locked\n")
	if hold == holdUntilEOF {
		io.Copy(io.Discard, os.Stdin)
	} else {
		time.Sleep(d)
	}
	if done := os.Getenv(envHoldDone); done != "" {
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return 2
		}
	}
	os.Remove(path)
	return 0
}

// spawnHolder is the spawning program's main; it returns the exit code.
func spawnHolder() int {
	code, err := strconv.Atoi(os.Getenv(envSpawnHolder))
	if err != nil {
		return 2
	}
	cmd, _, err := startHolderProcess(os.Getenv(intercept.EnvLogDir), os.Getenv(envHoldFor))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("holder %d\n", cmd.Process.Pid)
	return code
}

// startHolderProcess starts a holder in dir that holds its log for hold (envHoldFor), and returns
// once it does, with the holder's stdin (closing it ends a hold of holdUntilEOF).
func startHolderProcess(dir, hold string) (*exec.Cmd, io.WriteCloser, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Args = holderArgs
	cmd.Env = append(os.Environ(), envHoldLog+"="+dir, envHoldFor+"="+hold)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("holder said %q (%v), want locked", line, err)
	}
	return cmd, in, nil
}

// startHolder starts a holder in dir for hold; it is killed at the end of the test. Closing the
// writer it returns ends a hold of holdUntilEOF.
func startHolder(t *testing.T, dir, hold string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd, in, err := startHolderProcess(dir, hold)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, in
}

// release ends the hold of a holder started with holdUntilEOF and waits until it has exited (its
// log removed).
func release(t *testing.T, cmd *exec.Cmd, in io.WriteCloser) {
	t.Helper()
	in.Close()
	if err := cmd.Wait(); err != nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("holder %d: %v, exit code %d; want 0", cmd.Process.Pid, err, cmd.ProcessState.ExitCode())
	}
}

// backstop bounds a wait in these tests that only a hang (a bug) makes long.
const backstop = time.Minute

// holderLog is the raw log a holder of pid holds in dir.
func holderLog(dir string, pid int) string { return filepath.Join(dir, strconv.Itoa(pid)+"-1.alog") }

// waitingLine is the line waitForLogs prints first, for one holder.
func waitingLine(timeout string, pid int) string {
	return "allocscope: waiting up to " + timeout + " for 1 process(es) still holding a log: pid " +
		strconv.Itoa(pid) + " (" + holderCommand + ")\n"
}

// waitForLogs returns once the process holding a log exits (it holds it 300 ms), having printed
// one line naming it with its command line, and nothing else; a log nobody holds is not waited for.
// The holder's log is gone by then: waitForLogs waited for the hold to end.
func TestWaitForLogsUntilExit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "123-456.alog"), nil)
	holder, _ := startHolder(t, dir, "300ms")
	var notice, warn bytes.Buffer
	left := waitForLogs(dir, backstop, nil, &notice, &warn)
	if left != nil {
		t.Errorf("waitForLogs returned %v, want none left", left)
	}
	if _, err := os.Stat(holderLog(dir, holder.Process.Pid)); !os.IsNotExist(err) {
		t.Errorf("waitForLogs returned while the holder's log was still there (stat: %v)", err)
	}
	if want := waitingLine("1m0s", holder.Process.Pid); notice.String() != want || warn.Len() != 0 {
		t.Errorf("printed %q and warned %q; want %q and nothing", notice.String(), warn.String(), want)
	}
}

// poll makes the wait look again once; it fails the test when the wait has already returned. A
// poll that goes through shows that the look of the poll before it ended without returning.
func poll(t *testing.T, polls chan<- time.Time, what string) {
	t.Helper()
	select {
	case polls <- time.Time{}:
	case <-time.After(backstop):
		t.Fatalf("%s: the wait no longer looks again (it returned, or hangs)", what)
	}
}

// awaitEnd makes the wait look again until it returns, and returns what it returned.
func awaitEnd(t *testing.T, polls chan<- time.Time, done <-chan []intercept.LiveLog) []intercept.LiveLog {
	t.Helper()
	limit := time.After(backstop)
	for {
		select {
		case left := <-done:
			return left
		case polls <- time.Time{}:
		case <-limit:
			t.Fatal("the wait did not return")
		}
	}
}

// Processes started while waitForLogs waits are waited for too: a second holder, started during
// the wait, keeps it waiting after the first is gone, and the wait ends once the second is gone.
// The test makes the wait look again itself, step by step.
func TestWaitForLogsSeesNewProcesses(t *testing.T) {
	dir := t.TempDir()
	first, firstIn := startHolder(t, dir, holdUntilEOF)
	polls := make(chan time.Time)
	var notice, warn bytes.Buffer
	w := logWait{dir: dir, timeout: 10 * time.Second, poll: polls, notice: &notice, warn: &warn}
	done := make(chan []intercept.LiveLog, 1)
	go func() { done <- w.run() }()
	poll(t, polls, "first holder live")
	second, secondIn := startHolder(t, dir, holdUntilEOF)
	poll(t, polls, "both holders live")
	release(t, first, firstIn)
	poll(t, polls, "the first holder gone")        // its look sees the second holder alone
	poll(t, polls, "the second holder still live") // that look did not end the wait
	release(t, second, secondIn)
	if left := awaitEnd(t, polls, done); left != nil {
		t.Errorf("the wait returned %v, want none left", left)
	}
	if want := waitingLine("10s", first.Process.Pid); notice.String() != want || warn.Len() != 0 {
		t.Errorf("printed %q and warned %q; want %q and nothing", notice.String(), warn.String(), want)
	}
}

// At its deadline (here the test's own, of a 200 ms wait) waitForLogs gives up on a process that
// still holds its log, names it in a warning and returns its log.
func TestWaitForLogsTimeout(t *testing.T) {
	dir := t.TempDir()
	holder, _ := startHolder(t, dir, holdUntilEOF)
	pid := holder.Process.Pid
	deadline := make(chan time.Time, 1)
	deadline <- time.Time{}
	var notice, warn bytes.Buffer
	w := logWait{dir: dir, timeout: 200 * time.Millisecond, deadline: deadline, notice: &notice, warn: &warn}
	left := w.run()
	want := []intercept.LiveLog{{Path: holderLog(dir, pid), PID: pid}}
	if !slices.Equal(left, want) {
		t.Errorf("waitForLogs returned %v; want %v", left, want)
	}
	if got, want := notice.String(), waitingLine("200ms", pid); got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	wantWarn := "allocscope: stopped waiting for pid " + strconv.Itoa(pid) +
		" after 200ms (still running); the trace holds their events up to now\n"
	if warn.String() != wantWarn {
		t.Errorf("warned %q, want %q", warn.String(), wantWarn)
	}
}

// A real timer ends the wait too: waitForLogs with a 200 ms timeout gives up on a holder that holds
// its log until the test ends.
func TestWaitForLogsTimer(t *testing.T) {
	dir := t.TempDir()
	holder, _ := startHolder(t, dir, holdUntilEOF)
	var notice, warn bytes.Buffer
	left := waitForLogs(dir, 200*time.Millisecond, nil, &notice, &warn)
	pid := holder.Process.Pid
	wantWarn := "allocscope: stopped waiting for pid " + strconv.Itoa(pid) +
		" after 200ms (still running); the trace holds their events up to now\n"
	if len(left) != 1 || left[0].PID != pid || warn.String() != wantWarn {
		t.Errorf("waitForLogs returned %v and warned %q; want pid %d's log and %q", left, warn.String(), pid, wantWarn)
	}
}

// A closed stop ends the wait, with a warning naming the process still running.
func TestWaitForLogsStop(t *testing.T) {
	dir := t.TempDir()
	holder, _ := startHolder(t, dir, holdUntilEOF)
	stop := make(chan struct{})
	close(stop)
	var notice, warn bytes.Buffer
	left := waitForLogs(dir, backstop, stop, &notice, &warn)
	if len(left) != 1 || left[0].PID != holder.Process.Pid {
		t.Errorf("waitForLogs returned %v; want the holder's log", left)
	}
	wantWarn := "allocscope: stopped waiting for pid " + strconv.Itoa(holder.Process.Pid) +
		" (interrupted); the trace holds their events up to now\n"
	if notice.String() != waitingLine("1m0s", holder.Process.Pid) || warn.String() != wantWarn {
		t.Errorf("printed %q and warned %q; want the waiting line and %q", notice.String(), warn.String(), wantWarn)
	}
}

// Without live logs waitForLogs returns without waiting and prints nothing (a wait would print the
// waiting line); a missing directory is a warning.
func TestWaitForLogsNone(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "123-456.alog"), nil)
	var notice, warn bytes.Buffer
	if left := waitForLogs(dir, 10*time.Second, nil, &notice, &warn); left != nil {
		t.Errorf("waitForLogs returned %v; want none", left)
	}
	if notice.Len() != 0 || warn.Len() != 0 {
		t.Errorf("printed %q and warned %q; want nothing", notice.String(), warn.String())
	}
	missing := filepath.Join(dir, "missing")
	waitForLogs(missing, 10*time.Second, nil, &notice, &warn)
	want := "allocscope: warning: not waiting for processes still running: list live raw logs: stat " +
		missing + ": no such file or directory\n"
	if notice.Len() != 0 || warn.String() != want {
		t.Errorf("missing directory: printed %q and warned %q; want nothing and %q", notice.String(), warn.String(), want)
	}
}

// describeLogs names processes by pid, with the command line when asked and readable, and a log
// without a pid in its name by the name.
func TestDescribeLogs(t *testing.T) {
	self := os.Getpid()
	cmdline, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	cmd := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	if r := []rune(cmd); len(r) > 40 {
		cmd = string(r[:37]) + "..."
	}
	live := []intercept.LiveLog{{Path: "/d/1-2.alog", PID: self}, {Path: "/d/999999999-1.alog", PID: 999999999},
		{Path: "/d/odd.alog"}}
	want := fmt.Sprintf("pid %d (%s), pid 999999999, odd.alog", self, cmd)
	if got := describeLogs(live, true); got != want {
		t.Errorf("describeLogs = %q, want %q", got, want)
	}
	want = fmt.Sprintf("pid %d, pid 999999999, odd.alog", self)
	if got := describeLogs(live, false); got != want {
		t.Errorf("describeLogs without commands = %q, want %q", got, want)
	}
}

// dummyShim compiles a library that passes intercept.CheckShim but records nothing: record tests
// that need no events use it.
func dummyShim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "dummy.c"), filepath.Join(dir, "libdummy.so")
	writeFile(t, src, []byte("int "+intercept.ShimABISymbol+";\n"))
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return lib
}

// record waits for a process the program started that still holds a log (300 ms: the holder has
// ended its hold when record returns), says so in one line, then converts and exits with the
// program's exit code; -q hides the line.
func TestRecordWaitsForProcesses(t *testing.T) {
	shim := dummyShim(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envSpawnHolder, "5")
	t.Setenv(envHoldFor, "300ms")
	for _, quiet := range []bool{false, true} {
		out, held := tempPath(t, "out.arrow"), tempPath(t, "held")
		t.Setenv(envHoldDone, held)
		args := []string{"-o", out, "--shim", shim, "--", self}
		if quiet {
			args = append([]string{"-q"}, args...)
		}
		code, stdout, stderr := runMain(t, args...)
		var pid int
		if _, err := fmt.Sscanf(stdout, "holder %d\n", &pid); err != nil || code != 5 {
			t.Fatalf("quiet %v: exit code %d, stdout %q, stderr %q; want 5 and the holder's pid", quiet, code, stdout, stderr)
		}
		if _, err := os.Stat(held); err != nil {
			t.Errorf("quiet %v: record returned before the holder ended its hold (%v)", quiet, err)
		}
		noLogs := "allocscope: warning: " + out + ".raw: no process loaded the shim (a static binary, or LD_PRELOAD removed?)\n"
		lines := strings.SplitAfter(stderr, "\n")
		switch {
		case quiet && stderr != noLogs:
			t.Errorf("-q: stderr %q, want only %q", stderr, noLogs)
		case !quiet && (len(lines) != 6 || lines[0] != waitingLine("10s", pid) || lines[3] != noLogs):
			t.Errorf("stderr:\n%s\nwant the waiting line %q and the summary", stderr, waitingLine("10s", pid))
		}
	}
}

// A SIGINT to record while it waits ends the wait: record says so (not that the 10 s ran out), converts what is there (here an
// empty log, which fails: the raw logs are kept) and exits with the program's exit code.
func TestRecordWaitInterrupted(t *testing.T) {
	shim := dummyShim(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, logDir := filepath.Join(dir, "out.arrow"), filepath.Join(dir, "logs")
	cmd := exec.Command(self, "-o", out, "--log-dir", logDir, "--shim", shim, "--", self)
	cmd.Env = append(os.Environ(), envRunRecord+"=1", envSpawnHolder+"=5", envHoldFor+"=1m")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) // the holder too
	stderr := bufio.NewReader(pipe)
	first, err := stderr.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "allocscope: waiting up to 10s for 1 process(es)") {
		t.Fatalf("record's first line %q (%v), want the waiting line", first, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr) // a wait not ended by the signal would end after 10 s, and say so
	cmd.Wait()
	var pid int
	if _, err := fmt.Sscanf(stdout.String(), "holder %d\n", &pid); err != nil {
		t.Fatalf("stdout %q, want the holder's pid", stdout.String())
	}
	lines := strings.SplitAfter(first+string(rest), "\n")
	want := []string{waitingLine("10s", pid),
		"allocscope: stopped waiting for pid " + strconv.Itoa(pid) + " (interrupted); the trace holds their events up to now\n",
		"record: raw logs kept in " + logDir + "; convert them with `record convert " + logDir + " -o " + out + "`\n"}
	if code := cmd.ProcessState.ExitCode(); code != 5 || len(lines) != 5 || lines[0] != want[0] ||
		lines[1] != want[1] || !strings.HasPrefix(lines[2], "record: ") || lines[3] != want[2] {
		t.Errorf("exit code %d, stderr:\n%s\nwant 5 and\n%s%srecord: <why the empty log fails>\n%s",
			code, first+string(rest), want[0], want[1], want[2])
	}
	notExist(t, out)
	if _, err := os.Stat(filepath.Join(logDir, strconv.Itoa(pid)+"-1.alog")); err != nil {
		t.Errorf("raw log not kept: %v", err)
	}
}
