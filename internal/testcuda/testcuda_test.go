package testcuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/internal/intercept"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Every program is built and finds the fake libraries through its run path alone (no
// LD_LIBRARY_PATH), with its documented exit code; Run under the shim records its events.
func TestProgramsRun(t *testing.T) {
	env := Build(t)
	if again := Build(t); again != env {
		t.Errorf("second Build returned a different Env")
	}
	want := []string{"address_range", "barriers", "bench", "capture", "capture_order", "closefds", "ctxcache", "cupy_style",
		"daemon", "double_free", "forkexec", "gpa_local", "ipc_export", "killed", "leaky", "loop", "oom", "plain", "plugin", "pool_faults",
		"pooled", "pooled_fork", "pooled_lazy", "pooled_oom", "pooled_threads", "privdrop", "reset", "sighandler", "signals",
		"static_cudart", "streams", "stress", "sync_deadlock", "sync_race", "threads", "two_devices"}
	if got := env.Programs(); !slices.Equal(got, want) {
		t.Errorf("programs %v, want %v", got, want)
	}
	t.Setenv("LD_LIBRARY_PATH", "")
	for name, code := range map[string]int{"plain": 7, "static_cudart": 11, "cupy_style": 13, "threads": 17, "forkexec": 19} {
		err := exec.Command(env.Prog(name)).Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != code {
			t.Errorf("%s: %v, want exit code %d", name, err, code)
		}
	}
	logDir := filepath.Join(t.TempDir(), "logs")
	if err := intercept.PrepareLogDir(logDir); err != nil {
		t.Fatal(err)
	}
	r := env.Run(t, logDir, "killed")
	if r.Signal != syscall.SIGKILL || r.ExitCode != -1 || r.Stdout != "ready\n" || r.Stderr != "" {
		t.Errorf("killed: %+v", r)
	}
	if logs, _ := filepath.Glob(filepath.Join(logDir, "*.alog")); len(logs) != 1 {
		t.Errorf("killed under the shim left logs %v, want one", logs)
	}
}
