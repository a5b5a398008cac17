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

	"github.com/allocscope/allocscope/intercept"
)

// The test binary plays two more parts (see TestMain), so that these tests need neither the shim
// nor any tool:
//
//   - with envHoldLog=DIR it is a "holder": it creates DIR/<its pid>-1.alog, holds a shared flock on
//     it as the shim does, prints "locked", sleeps envHoldFor, removes the log and exits 0;
//   - with envSpawnHolder=N it is a program that starts a holder in $ALLOCSCOPE_LOG_DIR, prints
//     "holder <pid>" once the holder holds its log, and exits with N at once, leaving it running.
//
// A holder's command line is holderArgs.
const (
	envHoldLog     = "ALLOCSCOPE_TEST_HOLD_LOG"
	envHoldFor     = "ALLOCSCOPE_TEST_HOLD_FOR"
	envSpawnHolder = "ALLOCSCOPE_TEST_SPAWN_HOLDER"
)

var holderArgs = []string{"allocscope-test-holder", "worker.py", "--a-long-option-to-cut"}

// holderCommand is what the waiting line shows of holderArgs: its first 37 characters and "...".
const holderCommand = "allocscope-test-holder worker.py --a-..."

// holdLog is the holder's main; it returns the exit code.
func holdLog() int {
	d, err := time.ParseDuration(os.Getenv(envHoldFor))
	if err != nil {
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
	time.Sleep(d)
	os.Remove(path)
	return 0
}

// spawnHolder is the spawning program's main; it returns the exit code.
func spawnHolder() int {
	code, err := strconv.Atoi(os.Getenv(envSpawnHolder))
	if err != nil {
		return 2
	}
	cmd, err := startHolderProcess(os.Getenv(intercept.EnvLogDir), os.Getenv(envHoldFor))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("holder %d\n", cmd.Process.Pid)
	return code
}

// startHolderProcess starts a holder in dir that holds its log for d, and returns once it does.
func startHolderProcess(dir, d string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Args = holderArgs
	cmd.Env = append(os.Environ(), envHoldLog+"="+dir, envHoldFor+"="+d)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("holder said %q (%v), want locked", line, err)
	}
	return cmd, nil
}

// startHolder starts a holder in dir for d; it is killed at the end of the test.
func startHolder(t *testing.T, dir string, d time.Duration) *exec.Cmd {
	t.Helper()
	cmd, err := startHolderProcess(dir, d.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// waitingLine is the line waitForLogs prints first, for one holder.
func waitingLine(timeout string, pid int) string {
	return "allocscope: waiting up to " + timeout + " for 1 process(es) still holding a log: pid " +
		strconv.Itoa(pid) + " (" + holderCommand + ")\n"
}

// waitForLogs returns once the process holding a log exits (it holds it 300 ms), having printed
// one line naming it with its command line, and nothing else; a log nobody holds is not waited for.
func TestWaitForLogsUntilExit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "123-456.alog"), nil)
	start := time.Now()
	holder := startHolder(t, dir, 300*time.Millisecond)
	var notice, warn bytes.Buffer
	left := waitForLogs(dir, 10*time.Second, nil, &notice, &warn)
	elapsed := time.Since(start)
	if left != nil || elapsed < 300*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("waitForLogs returned %v after %v; want none left, after 0.3 s to 2 s", left, elapsed)
	}
	if want := waitingLine("10s", holder.Process.Pid); notice.String() != want || warn.Len() != 0 {
		t.Errorf("printed %q and warned %q; want %q and nothing", notice.String(), warn.String(), want)
	}
}

// Processes started while waitForLogs waits are waited for too: a second holder, started 100 ms
// into the wait and holding its log 600 ms, keeps it waiting after the first (500 ms) is gone.
func TestWaitForLogsSeesNewProcesses(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	first := startHolder(t, dir, 500*time.Millisecond)
	second := make(chan *exec.Cmd, 1)
	time.AfterFunc(100*time.Millisecond, func() {
		cmd, err := startHolderProcess(dir, "600ms")
		if err != nil {
			t.Error(err)
		}
		second <- cmd
	})
	var notice, warn bytes.Buffer
	left := waitForLogs(dir, 10*time.Second, nil, &notice, &warn)
	elapsed := time.Since(start)
	if cmd := <-second; cmd != nil {
		cmd.Wait()
	}
	if left != nil || elapsed < 700*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("waitForLogs returned %v after %v; want none left, after 0.7 s to 3 s", left, elapsed)
	}
	if want := waitingLine("10s", first.Process.Pid); notice.String() != want || warn.Len() != 0 {
		t.Errorf("printed %q and warned %q; want %q and nothing", notice.String(), warn.String(), want)
	}
}

// With a 200 ms timeout waitForLogs gives up on a process that holds its log longer, after about
// 200 ms, names it in a warning and returns its log.
func TestWaitForLogsTimeout(t *testing.T) {
	dir := t.TempDir()
	holder := startHolder(t, dir, time.Minute)
	pid := holder.Process.Pid
	var notice, warn bytes.Buffer
	start := time.Now()
	left := waitForLogs(dir, 200*time.Millisecond, nil, &notice, &warn)
	elapsed := time.Since(start)
	want := []intercept.LiveLog{{Path: filepath.Join(dir, strconv.Itoa(pid)+"-1.alog"), PID: pid}}
	if !slices.Equal(left, want) || elapsed < 200*time.Millisecond || elapsed > time.Second {
		t.Errorf("waitForLogs returned %v after %v; want %v after 0.2 s to 1 s", left, elapsed, want)
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

// Closing stop ends the wait at once, with a warning naming the process still running.
func TestWaitForLogsStop(t *testing.T) {
	dir := t.TempDir()
	holder := startHolder(t, dir, time.Minute)
	stop := make(chan struct{})
	var notice, warn bytes.Buffer
	start := time.Now() // before the timer is armed, so that the stop comes at least 0.1 s after it
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	left := waitForLogs(dir, 10*time.Second, stop, &notice, &warn)
	elapsed := time.Since(start)
	if len(left) != 1 || elapsed < 100*time.Millisecond || elapsed > time.Second {
		t.Errorf("waitForLogs returned %v after %v; want one log, after 0.1 s to 1 s", left, elapsed)
	}
	wantWarn := "allocscope: stopped waiting for pid " + strconv.Itoa(holder.Process.Pid) +
		" (interrupted); the trace holds their events up to now\n"
	if notice.String() != waitingLine("10s", holder.Process.Pid) || warn.String() != wantWarn {
		t.Errorf("printed %q and warned %q; want the waiting line and %q", notice.String(), warn.String(), wantWarn)
	}
}

// Without live logs waitForLogs returns at once and prints nothing; a missing directory is a warning.
func TestWaitForLogsNone(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "123-456.alog"), nil)
	var notice, warn bytes.Buffer
	start := time.Now()
	if left := waitForLogs(dir, 10*time.Second, nil, &notice, &warn); left != nil || time.Since(start) > time.Second {
		t.Errorf("waitForLogs returned %v after %v; want none at once", left, time.Since(start))
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

// record waits for a process the program started that still holds a log (300 ms), says so in one
// line, then converts and exits with the program's exit code; -q hides the line.
func TestRecordWaitsForProcesses(t *testing.T) {
	shim := dummyShim(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envSpawnHolder, "5")
	t.Setenv(envHoldFor, "300ms")
	for _, quiet := range []bool{false, true} {
		out := tempPath(t, "out.arrow")
		args := []string{"-o", out, "--shim", shim, "--", self}
		if quiet {
			args = append([]string{"-q"}, args...)
		}
		start := time.Now()
		code, stdout, stderr := runMain(t, args...)
		elapsed := time.Since(start)
		var pid int
		if _, err := fmt.Sscanf(stdout, "holder %d\n", &pid); err != nil || code != 5 {
			t.Fatalf("quiet %v: exit code %d, stdout %q, stderr %q; want 5 and the holder's pid", quiet, code, stdout, stderr)
		}
		if elapsed < 300*time.Millisecond || elapsed > 5*time.Second {
			t.Errorf("quiet %v: record took %v, want 0.3 s to 5 s", quiet, elapsed)
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

// A SIGINT to record while it waits ends the wait: record says so, converts what is there (here an
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
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	cmd.Wait()
	if time.Since(start) > 5*time.Second {
		t.Errorf("record took %v after SIGINT", time.Since(start))
	}
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
