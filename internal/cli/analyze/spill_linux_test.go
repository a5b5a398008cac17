package analyze

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
)

// bundledTrace is the bundled PyTorch training trace of the repository.
var bundledTrace = filepath.Join("bundled", "pytorch-train.arrow")

// With --memory 0 the requests spill whole to $TMPDIR, and the report is the one made in memory;
// the spill file is gone at the end.
func TestAnalyzeSpillsBeyondMemory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, inMemory, stderr := runMain("--json", bundledTrace)
	if code != 0 || stderr != "" {
		t.Fatalf("in memory: exit %d, stderr %q", code, stderr)
	}
	code, spilled, stderr := runMain("--json", "--memory", "0", bundledTrace)
	if code != 0 || stderr != "" || spilled != inMemory || len(spilled) < 10_000 {
		t.Fatalf("spilled: exit %d, stderr %q, %d bytes of report (%d in memory): equal %v", code, stderr,
			len(spilled), len(inMemory), spilled == inMemory)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("%d files left in $TMPDIR", len(left))
	}
}

// On a full disk (a file size limit of 4 KiB stands in for it) the spill's write error ends the
// analysis: one line naming the trace and the file, exit code 1, no report.
func TestAnalyzeSpillOnAFullDisk(t *testing.T) {
	if os.Getenv("ANALYZE_FULL_DISK") != "" {
		signal.Ignore(syscall.SIGXFSZ) // a write past the limit fails with EFBIG instead
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 4 << 10, Max: 4 << 10}); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runMain("--json", "--memory", "1", bundledTrace)
		fmt.Printf("exit %d, %d bytes out\n%s", code, len(stdout), stderr)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAnalyzeSpillOnAFullDisk$")
	cmd.Env = append(os.Environ(), "ANALYZE_FULL_DISK=1", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := regexp.MustCompile(`^exit 1, 0 bytes out\nanalyze: pytorch-train.arrow: spill the request stream to (\S+/allocscope-requests-\d+): write (\S+): file too large\nPASS\n$`)
	if m := want.FindStringSubmatch(string(out)); m == nil || m[1] != m[2] {
		t.Errorf("got %q, want %s", out, want)
	}
}
