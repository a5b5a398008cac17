package record

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
)

// fileMode returns the permission bits of path, failing the test when it is not a regular file.
func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s: %v, want a regular file", path, err)
	}
	return st.Mode().Perm()
}

// The trace is a new file of mode 0644 less the umask, or keeps the mode of the file it replaces; a
// symlink to a trace stays a link and its target gets the new trace; record shim writes its library
// with the compiler's 0755 less the umask.
func TestOutputModes(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	env := testcuda.Build(t)
	dir := t.TempDir()
	fresh, kept := filepath.Join(dir, "fresh.arrow"), filepath.Join(dir, "kept.arrow")
	writeFile(t, kept, []byte("an older trace"))
	if err := os.Chmod(kept, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.arrow")
	if err := os.Symlink(kept, link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fresh, link} {
		if code, _, stderr := runMain(t, "-q", "-o", out, "--shim", env.Shim, "--", env.Prog("plain")); code != 7 || stderr != "" {
			t.Fatalf("record -o %s: exit code %d, stderr %q; want 7 and nothing", out, code, stderr)
		}
	}
	if mode := fileMode(t, fresh); mode != 0o640 {
		t.Errorf("%s: mode %v, want 0640", fresh, mode)
	}
	if mode := fileMode(t, kept); mode != 0o600 {
		t.Errorf("%s: mode %v, want 0600 (kept)", kept, mode)
	}
	events, _ := testcuda.ReadTrace(t, kept)
	testcuda.CheckEvents(t, events, testcuda.PlainEvents)
	if dest, err := os.Readlink(link); err != nil || dest != kept {
		t.Errorf("%s: %q (%v), want still a link to %s", link, dest, err, kept)
	}
	lib := filepath.Join(dir, "liballocscope.so")
	if code, _, stderr := runMain(t, "shim", "-o", lib); code != 0 || stderr != "" {
		t.Fatalf("shim: exit code %d, stderr %q", code, stderr)
	}
	if mode := fileMode(t, lib); mode != 0o750 {
		t.Errorf("%s: mode %v, want 0750", lib, mode)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"fresh.arrow", "kept.arrow", "liballocscope.so", "link.arrow"}; !slices.Equal(names, want) {
		t.Errorf("directory holds %q, want %q", names, want)
	}
}

// Outputs that are not regular files, and `-`, are refused with one line before anything runs:
// record shim compiles nothing, record convert converts nothing and keeps the raw logs.
func TestOutputRefused(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "plain.arrow")
	recordKeepingRaw(t, env, out)
	raw := out + ".raw"
	logs, _ := filepath.Glob(filepath.Join(raw, "*.alog"))
	const dash = "the trace is written to a file only (standard output carries the program's output); name a file (./- for one called -)"
	hint := func(cmd string) string { return "\nRun '" + cmd + " --help' for usage.\n" }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-o", "-", "--shim", env.Shim, "--", env.Prog("plain")}, 2, "record: -o -: " + dash + hint("record")},
		{[]string{"convert", raw, "-o", "-"}, 2, "record: -o -: " + dash + hint("record convert")},
		{[]string{"convert", raw, "-o", "/dev/full"}, 1, "record: trace: /dev/full is a character device, not a regular file\n"},
		{[]string{"convert", raw, "-o", dir}, 1, "record: trace: " + dir + " is a directory, not a regular file\n"},
		{[]string{"shim", "-o", "-"}, 2, "record: -o -: the shim library is written to a file only; name a file (./- for one called -)" +
			hint("record shim")},
		{[]string{"shim", "-o", "/dev/full"}, 1, "record: shim: /dev/full is a character device, not a regular file\n"},
		{[]string{"shim", "-o", dir}, 1, "record: shim: " + dir + " is a directory, not a regular file\n"},
	} {
		code, stdout, stderr := runMain(t, c.args...)
		if code != c.code || stdout != "" || stderr != c.want {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q; want %d and %q", c.args, code, stdout, stderr, c.code, c.want)
		}
	}
	if now, _ := filepath.Glob(filepath.Join(raw, "*.alog")); len(logs) != 1 || !slices.Equal(now, logs) {
		t.Errorf("raw logs %q before, %q after; want the one kept", logs, now)
	}
	notExist(t, "-")
}

// A trace write that fails half way (`ulimit -f 1`: EFBIG past 512 bytes, as a full disk gives
// ENOSPC) exits 1 with one line, keeps the trace it would have replaced and the raw logs, and
// leaves no temporary file.
func TestConvertWriteFailsHalfWay(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "plain.arrow")
	recordKeepingRaw(t, env, out)
	writeFile(t, out, []byte("the old trace"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -f 1 && exec "$0" "$@"`, self, "convert", out+".raw", "-o", out)
	cmd.Env = append(os.Environ(), envRunRecord+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	want := "record: write " + out + ": file too large\n"
	if cmd.ProcessState.ExitCode() != 1 || stdout.String() != "" || stderr.String() != want {
		t.Errorf("exit %v, stdout %q, stderr %q; want 1 and %q", err, stdout.String(), stderr.String(), want)
	}
	if data, _ := os.ReadFile(out); string(data) != "the old trace" {
		t.Errorf("%s holds %.40q, want the old trace", out, data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 || entries[0].Name() != "plain.arrow" || entries[1].Name() != "plain.arrow.raw" {
		t.Errorf("directory holds %v, want plain.arrow and plain.arrow.raw", entries)
	}
	if logs, _ := filepath.Glob(filepath.Join(out+".raw", "*.alog")); len(logs) != 1 {
		t.Errorf("raw logs %q, want the one kept", logs)
	}
}

// recordKeepingRaw records testdata/progs/plain.c (exit code 7) into out, keeping its raw logs.
func recordKeepingRaw(t *testing.T, env *testcuda.Env, out string) {
	t.Helper()
	if code, _, _ := runMain(t, "-q", "--keep-raw", "-o", out, "--shim", env.Shim, "--", env.Prog("plain")); code != 7 {
		t.Fatalf("record exit code %d, want 7", code)
	}
}
