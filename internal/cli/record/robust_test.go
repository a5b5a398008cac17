package record

// Robustness tests of record: it waits for the processes its program leaves behind, reports events
// the shim could not write, refuses a --shim that is not the shim, and -q keeps stderr empty. record
// runs in a process of its own (the test binary, re-executed), killed with its process group after a
// deadline, so a hang fails the test instead of stalling go test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/trace"
)

// robustTimeout bounds every record run of these tests.
const robustTimeout = 60 * time.Second

// robustRecord runs record with args in its own process and process group, with LD_LIBRARY_PATH set
// to the fake libraries, and returns its exit code, stdout and stderr. After robustTimeout the group
// is killed and t fails.
func robustRecord(t *testing.T, env *testcuda.Env, args ...string) (int, string, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), robustTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), envRunRecord+"=1", "LD_LIBRARY_PATH="+env.LibDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("record %q: no end after %v, killed: %v\nstderr:\n%s", args, robustTimeout, err, stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("record %q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// countTraceEvents reads the trace at path (which must be valid) and counts its events per function.
func countTraceEvents(t *testing.T, path string) (int64, map[string]int64) {
	t.Helper()
	r, err := trace.Open(path)
	if err != nil {
		t.Fatalf("open trace: %v", err)
	}
	defer r.Close()
	var n int64
	byFunction := map[string]int64{}
	for {
		batch, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, byFunction
		}
		if err != nil {
			t.Fatalf("read trace %s: %v", path, err)
		}
		for i := range batch {
			byFunction[batch[i].Function]++
		}
		n += int64(len(batch))
	}
}

// awaitMarker waits (at the end of the test) up to limit for the daemon of testdata/progs/daemon.c to
// create its marker file, so that it does not outlive the test; not when record failed before
// running the program (one line "record: ..." on stderr, exit code 1).
func awaitMarker(t *testing.T, marker string, limit time.Duration, code int, stderr string) {
	if code == 1 && strings.HasPrefix(stderr, "record: ") && strings.Count(stderr, "\n") == 1 {
		return
	}
	t.Cleanup(func() {
		for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(marker); err == nil {
				return
			}
		}
		t.Errorf("the daemon did not create %s within %v", marker, limit)
	})
}

// 4. A daemonized grandchild that allocates after record's child exited: record waits for it (up to
// --wait, 10 s by default) and the trace holds all its 1,400 events; record exits with 0.
func TestRecordDaemonGrandchild(t *testing.T) {
	env := testcuda.Build(t)
	marker, out := tempPath(t, "done"), tempPath(t, "out.arrow")
	code, stdout, stderr := robustRecord(t, env, "-o", out, "--shim", env.Shim, "--", env.Prog("daemon"), marker)
	awaitMarker(t, marker, 10*time.Second, code, stderr)
	if code != 0 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want 0 and nothing (stderr %q)", code, stdout, stderr)
	}
	n, byFunction := countTraceEvents(t, out)
	if n != 1400 || byFunction["cudaMalloc"] != 700 || byFunction["cudaFree"] != 700 {
		t.Errorf("trace: %d events %v, want 700 cudaMalloc and 700 cudaFree of the grandchild; stderr:\n%s", n, byFunction, stderr)
	}
}

// 4'. A grandchild that outlives --wait 500ms (it makes its calls only once the test lets it, after
// record returned): record says it stopped waiting for it, writes the events recorded so far (none)
// into a valid trace and exits with 0.
func TestRecordStopsWaiting(t *testing.T) {
	env := testcuda.Build(t)
	marker, out, goFile := tempPath(t, "done"), tempPath(t, "out.arrow"), tempPath(t, "go")
	code, _, stderr := robustRecord(t, env, "-o", out, "--shim", env.Shim, "--wait", "500ms", "--",
		env.Prog("daemon"), marker, "0", goFile)
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the grandchild finished before it was let go")
	}
	writeFile(t, goFile, nil)
	awaitMarker(t, marker, 15*time.Second, code, stderr)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if re := regexp.MustCompile(`(?m)stopped waiting for pid [0-9]+`); len(re.FindAllString(stderr, -1)) != 1 {
		t.Errorf("stderr:\n%s\nwant one line matching %s", stderr, re)
	}
	if n, _ := countTraceEvents(t, out); n != 0 {
		t.Errorf("trace holds %d events, want none: the grandchild made its calls after record returned", n)
	}
}

// fullDiskPairs is the number of cudaMalloc/cudaFree pairs of the full-disk tests.
const fullDiskPairs = 500000

// 5. The raw logs' filesystem fills up: record exits with the program's exit code (0), prints one
// line "N events not recorded" on stderr, and writes a valid trace with Events + N == 2*pairs. The
// file-size limit (on the program only, not on record) stands in for a full disk; a real one is an
// 8 MiB tmpfs holding the raw logs (skipped where mounting is not allowed).
func TestRecordFullDisk(t *testing.T) {
	env := testcuda.Build(t)
	loop := []string{env.Prog("loop"), strconv.Itoa(fullDiskPairs)}
	t.Run("ulimit", func(t *testing.T) {
		out := tempPath(t, "out.arrow")
		args := append([]string{"-o", out, "--shim", env.Shim, "--", "/bin/sh", "-c",
			`ulimit -f 8192; trap "" XFSZ; exec "$0" "$@"`}, loop...)
		checkRecordFullDisk(t, out, args)
	})
	t.Run("tmpfs", func(t *testing.T) {
		mnt := t.TempDir()
		if msg, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN; EPERM in most containers): %v: %s",
				err, strings.TrimSpace(string(msg)))
		}
		t.Cleanup(func() {
			if msg, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", mnt, err, msg)
			}
		})
		out := tempPath(t, "out.arrow")
		args := append([]string{"-o", out, "--log-dir", filepath.Join(mnt, "raw"), "--shim", env.Shim, "--"}, loop...)
		checkRecordFullDisk(t, out, args)
	})
}

func checkRecordFullDisk(t *testing.T, out string, args []string) {
	t.Helper()
	const events = 2 * fullDiskPairs
	code, stdout, stderr := robustRecord(t, testcuda.Build(t), args...)
	if want := fmt.Sprintf("loop: %d pairs through the runtime, 0 failures\n", fullDiskPairs); code != 0 || stdout != want {
		t.Errorf("exit %d, stdout %q; want 0 and %q", code, stdout, want)
	}
	re := regexp.MustCompile(`(?m)^.*?([0-9][0-9,]*) events? (were )?not recorded.*$`)
	m := re.FindAllStringSubmatch(stderr, -1)
	if len(m) != 1 {
		t.Fatalf("stderr:\n%s\nwant one line matching %s", stderr, re)
	}
	lost, err := strconv.ParseInt(strings.ReplaceAll(m[0][1], ",", ""), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := countTraceEvents(t, out)
	if n+lost != events || n >= events {
		t.Errorf("trace has %d events, record says %d not recorded: %d in all, want %d with some lost", n, lost, n+lost, events)
	}
	t.Logf("%d events recorded, %d not; stderr:\n%s", n, lost, stderr)
}

// 9. --shim naming a file that is not an allocscope shim (a text file, a shared library that is
// something else): record fails with one line saying so before it runs the program.
func TestRecordNotAShim(t *testing.T) {
	env := testcuda.Build(t)
	text := tempPath(t, "shim.so")
	if err := os.WriteFile(text, []byte("not a library\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, shim := range map[string]string{"text": text, "other-library": filepath.Join(env.LibDir, "libcudart.so")} {
		t.Run(name, func(t *testing.T) {
			marker, out := tempPath(t, "ran"), tempPath(t, "out.arrow")
			code, stdout, stderr := robustRecord(t, env, "-o", out, "--shim", shim, "--", "touch", marker)
			if code == 0 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want a failure", code, stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "not an allocscope shim") {
				t.Errorf("stderr %q, want one line saying \"not an allocscope shim\"", stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the program ran")
			}
			notExist(t, out)
		})
	}
}

// 10. record -q on a run of more than 1<<20 events (no progress bar either) prints nothing on
// stderr when the program prints nothing there.
func TestRecordQuietLargeRun(t *testing.T) {
	env := testcuda.Build(t)
	const pairs = 600000 // 1,200,000 events > 1<<20
	ctx, cancel := context.WithTimeout(context.Background(), robustTimeout)
	defer cancel()
	base := env.RunWith(t, ctx, "", nil, nil, "loop", strconv.Itoa(pairs))
	if base.ExitCode != 0 || base.Stderr != "" {
		t.Fatalf("loop alone: %+v", base)
	}
	out := tempPath(t, "out.arrow")
	code, stdout, stderr := robustRecord(t, env, "-q", "-o", out, "--shim", env.Shim, "--", env.Prog("loop"), strconv.Itoa(pairs))
	if code != 0 || stdout != base.Stdout {
		t.Errorf("exit %d, stdout %q; want 0 and %q", code, stdout, base.Stdout)
	}
	if stderr != "" {
		t.Errorf("record -q wrote on stderr (%d bytes): %q", len(stderr), stderr)
	}
	if n, _ := countTraceEvents(t, out); n != 2*pairs {
		t.Errorf("trace has %d events, want %d", n, 2*pairs)
	}
}
