package record

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/testcuda"
)

// envRunRecord makes the test binary act as the record command (for tests that need record in its
// own process, such as the signal tests): the binary re-executes itself with this variable set.
const envRunRecord = "ALLOCSCOPE_TEST_RUN_RECORD"

func TestMain(m *testing.M) {
	if os.Getenv(envHoldLog) != "" {
		os.Exit(holdLog())
	}
	if os.Getenv(envRunRecord) == "1" {
		os.Unsetenv(envRunRecord)
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv(envSpawnHolder) != "" {
		os.Exit(spawnHolder())
	}
	code := m.Run()
	testcuda.Cleanup()
	os.Exit(code)
}

// runMain runs record in-process with args and returns its exit code, stdout and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// recordProcess is record running in a process of its own (the test binary, re-executed).
type recordProcess struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr bytes.Buffer
}

// startRecord starts record with args in its own process (and process group), its stdin not a
// terminal. Read its stdout with readLine, then call wait.
func startRecord(t *testing.T, args ...string) *recordProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &recordProcess{cmd: exec.Command(self, args...)}
	p.cmd.Env = append(os.Environ(), envRunRecord+"=1")
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdout = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, nothing outlives the test: a hung run is killed with its process group.
	timer := time.AfterFunc(30*time.Second, func() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	t.Cleanup(func() {
		timer.Stop()
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	})
	return p
}

// readLine returns the next line record's program wrote to stdout.
func (p *recordProcess) readLine(t *testing.T) string {
	t.Helper()
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading record's stdout: %v (got %q; stderr %q)", err, line, p.stderr.String())
	}
	return line
}

// wait reads the rest of stdout and returns it with record's exit code (-1 when a signal killed
// record itself).
func (p *recordProcess) wait(t *testing.T) (int, string) {
	t.Helper()
	rest, err := io.ReadAll(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	err = p.cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return p.cmd.ProcessState.ExitCode(), string(rest)
}

// checkSummary asserts the summary record printed at the end of stderr: the events line exactly,
// the time line by its form, and the output line.
func checkSummary(t *testing.T, stderr, wantEvents, output string, withWallTime bool) {
	t.Helper()
	timeLine := `allocscope: [0-9.]+ (ns|µs|ms|s) inside allocation calls`
	if withWallTime {
		timeLine += ` \([0-9.]+% of [0-9.]+ (ms|s) wall time\)`
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(wantEvents) + "\n" + timeLine + "\n" +
		regexp.QuoteMeta("allocscope: wrote "+output) + "\n\\z")
	if !re.MatchString(stderr) {
		t.Errorf("stderr:\n%s\nwant it to end with the summary\n%s", stderr, re)
	}
}

// oneLineError asserts that stderr is exactly one line, "record: " + want.
func oneLineError(t *testing.T, stderr, want string) {
	t.Helper()
	if stderr != "record: "+want+"\n" {
		t.Errorf("stderr %q, want %q", stderr, "record: "+want+"\n")
	}
	if strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr has %d lines, want 1", strings.Count(stderr, "\n"))
	}
}

func notExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v), want it gone", path, err)
	}
}

func tempPath(t *testing.T, name string) string {
	return filepath.Join(t.TempDir(), name)
}
