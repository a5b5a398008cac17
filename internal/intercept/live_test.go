package intercept

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// envHoldLocks makes the test binary, run with -test.run=TestHoldLocksHelper, a process that takes a
// shared flock on each file of this path list (the way the shim locks its raw log), prints "locked"
// and sleeps until killed.
const envHoldLocks = "ALLOCSCOPE_TEST_HOLD_LOCKS"

// TestHoldLocksHelper is not a test: it is the lock-holding process of startLockHolder.
func TestHoldLocksHelper(t *testing.T) {
	paths := os.Getenv(envHoldLocks)
	if paths == "" {
		t.Skip("helper process for the LiveLogs tests")
	}
	for _, p := range filepath.SplitList(paths) {
		f, err := os.Open(p)
		if err != nil {
			os.Exit(2)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			os.Exit(3)
		}
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// startLockHolder starts a process that holds a shared flock on each of paths, and returns once it
// holds them. The process is killed at the end of the test.
func startLockHolder(t *testing.T, paths ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldLocksHelper$")
	cmd.Env = append(os.Environ(), envHoldLocks+"="+strings.Join(paths, string(filepath.ListSeparator)))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("lock holder said %q (%v), want locked", line, err)
	}
	return cmd
}

// LiveLogs lists exactly the *.alog files that another process holds a flock on, with the pid of
// their names (0 for a name without one), leaves the holder's locks in place, and lists none once
// the holder is killed with SIGKILL.
func TestLiveLogs(t *testing.T) {
	dir := t.TempDir()
	held, free, odd, notLog := filepath.Join(dir, "123-456.alog"), filepath.Join(dir, "124-457.alog"),
		filepath.Join(dir, "odd.alog"), filepath.Join(dir, "125-458.ring")
	for _, p := range []string{held, free, odd, notLog} {
		writeTestFile(t, p, nil)
	}
	holder := startLockHolder(t, held, odd, notLog)
	want := []LiveLog{{Path: held, PID: 123}, {Path: odd, PID: 0}}
	for i := 0; i < 2; i++ { // the second time: the first did not take the holder's locks away
		got, err := LiveLogs(dir)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("LiveLogs #%d = %v, %v; want %v", i+1, got, err, want)
		}
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holder.Wait()
	if got, err := LiveLogs(dir); err != nil || got != nil {
		t.Errorf("LiveLogs after the holder died = %v, %v; want none", got, err)
	}
	// A log that nobody holds was not left locked by LiveLogs itself.
	f, err := os.Open(free)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("flock of a log LiveLogs looked at: %v, want it free", err)
	}
}

// LiveLogs of a missing directory fails; of an empty one it lists nothing.
func TestLiveLogsNoLogs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := LiveLogs(missing)
	if want := "list live raw logs: stat " + missing + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("LiveLogs(missing) error %v, want %q", err, want)
	}
	if got, err := LiveLogs(t.TempDir()); err != nil || got != nil {
		t.Errorf("LiveLogs(empty) = %v, %v; want none", got, err)
	}
}
