package analyze

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/pool"
)

// --emit-config and --html write a new file with mode 0644 less the umask, keep the mode of a file
// they replace, and write through a symlink to a regular file, leaving the link a link.
func TestAnalyzeOutputFiles(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := writeTrace(t, dir)
	cfgPath, htmlPath := filepath.Join(dir, "pool.json"), filepath.Join(dir, "report.html")
	if err := os.WriteFile(htmlPath, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "real.json")
	if err := os.WriteFile(real, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-q", "--emit-config", cfgPath, "--html", htmlPath, path}, {"-q", "--emit-config", link, path}} {
		if code, stdout, stderr := runMain(args...); code != 0 || stdout != "" || stderr != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	for file, mode := range map[string]os.FileMode{cfgPath: 0o644, htmlPath: 0o600, real: 0o640} {
		if st, err := os.Stat(file); err != nil || st.Mode() != mode {
			t.Errorf("%s: mode %v (%v), want %v", file, st.Mode(), err, mode)
		}
	}
	if _, err := pool.LoadConfig(real); err != nil {
		t.Errorf("%s does not hold a pool.json: %v", real, err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symlink (%v)", link, err)
	}
	written, _ := os.ReadFile(cfgPath)
	through, _ := os.ReadFile(real)
	if string(written) != string(through) || !strings.HasSuffix(string(written), "}\n") {
		t.Errorf("pool.json through the link differs from the one written directly:\n%s\n%s", through, written)
	}
	if page, _ := os.ReadFile(htmlPath); !strings.HasPrefix(string(page), "<!DOCTYPE html>") {
		t.Errorf("report.html starts %.40q", page)
	}
}

// `-` sends --emit-config or --html to standard output, once -q keeps the report off it; the
// pool.json there is the one written to a file.
func TestAnalyzeOutputToStdout(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir)
	cfgPath := filepath.Join(dir, "pool.json")
	if code, _, stderr := runMain("-q", "--emit-config", cfgPath, path); code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want, _ := os.ReadFile(cfgPath)
	code, stdout, stderr := runMain("-q", "--emit-config", "-", path)
	if code != 0 || stdout != string(want) || stderr != "" {
		t.Errorf("--emit-config -: exit %d, stderr %q, stdout %q; want 0 and %q", code, stderr, stdout, want)
	}
	var cfg pool.Config
	if err := json.Unmarshal([]byte(stdout), &cfg); err != nil {
		t.Errorf("stdout is not a pool.json: %v", err)
	}
	code, stdout, stderr = runMain("-q", "--html", "-", path)
	if code != 0 || !strings.HasPrefix(stdout, "<!DOCTYPE html>") || stderr != "" {
		t.Errorf("--html -: exit %d, stderr %q, stdout %.40q", code, stderr, stdout)
	}
	const hint = "Run 'analyze --help' for usage.\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--emit-config", "-", path}, "analyze: --emit-config -: standard output also carries the report; add -q\n"},
		{[]string{"--pytorch-conf", "-q", "--html", "-", path}, "analyze: --html -: standard output also carries the report; add -q\n"},
		{[]string{"-q", "--html", "-", "--emit-config", "-", path}, "analyze: --html - and --emit-config - cannot both write standard output\n"},
	} {
		code, stdout, stderr := runMain(c.args...)
		if code != 2 || stdout != "" || stderr != c.want+hint {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want+hint)
		}
	}
}

// An output in a directory that refuses new files fails before the analysis, with one line, exit 1,
// and no file. (Faults during the write itself, a full disk at write or fsync, are injected in
// package outfile's tests.)
func TestAnalyzeUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir())
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "pool.json")
	code, stdout, stderr := runMain("-q", "--emit-config", out, path)
	want := "analyze: --emit-config: cannot create a file in " + dir + ": permission denied\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v behind", entries)
	}
}

// envRunAnalyze makes the test binary act as the analyze command, for a test that runs it in a
// process of its own (with a file size limit).
const envRunAnalyze = "ALLOCSCOPE_TEST_RUN_ANALYZE"

func TestMain(m *testing.M) {
	if os.Getenv(envRunAnalyze) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// A write that fails half way (the file size limit of `ulimit -f 1`, which fails a write past
// 512 bytes with EFBIG as a full disk fails it with ENOSPC) exits 1 with one line naming the file
// and leaves the file it would have replaced as it was, and no temporary file.
func TestAnalyzeWriteFailsHalfWay(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir())
	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, []byte("the old report"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -f 1 && exec "$0" "$@"`, self, "-q", "--html", out, path)
	cmd.Env = append(os.Environ(), envRunAnalyze+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	want := "analyze: --html: write " + out + ": file too large\n"
	if cmd.ProcessState.ExitCode() != 1 || stdout.String() != "" || stderr.String() != want {
		t.Errorf("exit %v, stdout %q, stderr %q; want 1 and %q", err, stdout.String(), stderr.String(), want)
	}
	if data, _ := os.ReadFile(out); string(data) != "the old report" {
		t.Errorf("%s holds %.40q, want the old report", out, data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v, want report.html alone", entries)
	}
}
