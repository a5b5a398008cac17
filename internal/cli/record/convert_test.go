package record

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/trace"
)

// record --keep-raw leaves the raw logs in OUT.raw; `record convert --keep-raw OUT.raw -o
// other.arrow` and `record convert OUT.raw` (default name OUT) write the same events and command
// line as the run; the second removes OUT.raw, so that a new `record -o OUT` is not refused for the
// raw logs of the first.
func TestConvertKeptRaw(t *testing.T) {
	env := testcuda.Build(t)
	out := tempPath(t, "plain.arrow")
	if code, _, _ := runMain(t, "--keep-raw", "-o", out, "--shim", env.Shim, "--", env.Prog("plain")); code != 7 {
		t.Fatalf("record exit code %d, want 7", code)
	}
	direct, directInfo := testcuda.ReadTrace(t, out)
	raw := out + ".raw"
	logs, _ := filepath.Glob(filepath.Join(raw, "*.alog"))
	lanes, _ := filepath.Glob(filepath.Join(raw, "*.lanes"))
	if len(logs) != 1 || len(lanes) != 1 {
		t.Fatalf("%s holds logs %v and lanes %v, want one of each", raw, logs, lanes)
	}
	const summary = "allocscope: 55 events from 1 process(es), device(s) 0,1, peak live 2 MiB"
	other := filepath.Join(t.TempDir(), "other.arrow")
	code, stdout, stderr := runMain(t, "convert", "--keep-raw", raw, "-o", other)
	if code != 0 || stdout != "" {
		t.Errorf("convert: exit code %d, stdout %q", code, stdout)
	}
	checkSummary(t, stderr, summary, other, false)
	checkSameTrace(t, other, direct, directInfo.Command)

	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMain(t, "convert", raw+"/")
	if code != 0 {
		t.Errorf("convert without -o: exit code %d, stderr %q", code, stderr)
	}
	checkSummary(t, stderr, summary, out, false)
	checkSameTrace(t, out, direct, directInfo.Command)
	notExist(t, raw) // converted, so removed: a new record -o out starts clean
	code, _, stderr = runMain(t, "-q", "-o", out, "--shim", env.Shim, "--", env.Prog("plain"))
	if code != 7 || stderr != "" {
		t.Errorf("record -o %s after its convert: exit code %d, stderr %q; want 7 and nothing", out, code, stderr)
	}
	events, _ := testcuda.ReadTrace(t, out)
	testcuda.CheckEvents(t, events, testcuda.PlainEvents)
}

func checkSameTrace(t *testing.T, path string, want []trace.Event, command []string) {
	t.Helper()
	got, info := testcuda.ReadTrace(t, path)
	if !slices.Equal(got, want) {
		t.Errorf("%s: %d events differ from the direct run's %d", path, len(got), len(want))
	}
	if info.Source != "allocscope" || !slices.Equal(info.Command, command) {
		t.Errorf("%s: source %q command %q, want allocscope %q", path, info.Source, info.Command, command)
	}
}

// A record killed with its program (SIGKILL to the process group) leaves its --log-dir behind and
// no trace; `record convert` recovers the three allocations made before "ready".
func TestConvertLogDirLeftBehind(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	out, logDir := filepath.Join(dir, "run.arrow"), filepath.Join(dir, "logs")
	p := startRecord(t, "-o", out, "--log-dir", logDir, "--shim", env.Shim, "--", env.Prog("signals"))
	if line := p.readLine(t); line != "ready\n" {
		t.Fatalf("first line %q, want ready", line)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.wait(t); code != -1 {
		t.Errorf("record exit code %d, want -1 (killed)", code)
	}
	notExist(t, out)
	code, _, stderr := runMain(t, "convert", logDir, "-o", out)
	if code != 0 {
		t.Fatalf("convert: exit code %d, stderr %q", code, stderr)
	}
	checkSummary(t, stderr, "allocscope: 3 events from 1 process(es), device(s) 0, peak live 6 KiB", out, false)
	events, info := testcuda.ReadTrace(t, out)
	testcuda.CheckEvents(t, events, testcuda.SignalsEventsBeforeSignal)
	if !slices.Equal(info.Command, []string{env.Prog("signals")}) {
		t.Errorf("command %q, want the program's", info.Command)
	}
}

// `record convert` on a missing, empty or corrupt directory: one line naming what is wrong, exit 1,
// and no trace file.
func TestConvertBadInput(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	empty := filepath.Join(dir, "empty")
	short := filepath.Join(dir, "short")
	for _, d := range []string{empty, short} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(short, "10-20.alog"), []byte("not a raw log"))
	badRecord := corruptRun(t, env, filepath.Join(dir, "bad.arrow"))
	tests := []struct{ dir, err string }{
		{missing, "read raw logs: stat " + missing + ": no such file or directory"},
		{empty, empty + ": no raw logs (*.alog)"},
		{short, short + "/10-20.alog: header: file has 13 bytes, a raw log has at least 4096"},
		{badRecord.dir, "convert raw logs " + badRecord.dir + ": " + badRecord.log + ": lane 0: record 10: unknown function id 238"},
	}
	for _, tc := range tests {
		out := filepath.Join(dir, "out.arrow")
		code, stdout, stderr := runMain(t, "convert", tc.dir, "-o", out)
		if code != 1 || stdout != "" {
			t.Errorf("convert %s: exit code %d, stdout %q; want 1 and nothing", tc.dir, code, stdout)
		}
		oneLineError(t, stderr, tc.err)
		notExist(t, out)
	}
}

type rawRun struct{ dir, log string }

// corruptRun records plain with --keep-raw and overwrites the function id of its 11th record (in
// the first lane of the lanes file: 55 records are never flushed) with 238.
func corruptRun(t *testing.T, env *testcuda.Env, out string) rawRun {
	t.Helper()
	recordKeepingRaw(t, env, out)
	lanes, _ := filepath.Glob(filepath.Join(out+".raw", "*.lanes"))
	if len(lanes) != 1 {
		t.Fatalf("lanes %v, want one", lanes)
	}
	f, err := os.OpenFile(lanes[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{238}, 4096+10*64+63); err != nil {
		t.Fatal(err)
	}
	return rawRun{dir: out + ".raw", log: lanes[0][:len(lanes[0])-len(".lanes")] + ".alog"}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
