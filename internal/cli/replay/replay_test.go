package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/replay"
	"github.com/allocscope/allocscope/internal/version"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// writeTrace writes the replay package's small hand-made trace (peak live 6000 bytes, one block
// never freed, streams 0 and 7) as an Arrow file and returns its path.
func writeTrace(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "small.arrow")
	w, err := trace.Create(path, trace.Info{Source: "allocscope"})
	if err != nil {
		t.Fatal(err)
	}
	type req struct {
		op           trace.Op
		addr, size   uint64
		stream       uint64
		functionName string
	}
	for i, r := range []req{
		{trace.OpAlloc, 0x1000, 1000, 0, "cudaMalloc"}, {trace.OpAlloc, 0x2000, 3000, 7, "cudaMallocAsync"},
		{trace.OpFree, 0x1000, 0, 0, "cudaFree"}, {trace.OpAlloc, 0x1000, 1000, 0, "cudaMalloc"},
		{trace.OpAlloc, 0x5000, 2000, 7, "cudaMallocAsync"}, {trace.OpFree, 0x2000, 0, 7, "cudaFreeAsync"},
		{trace.OpFree, 0x5000, 0, 7, "cudaFreeAsync"}, {trace.OpFree, 0x9999, 0, 0, "cudaFree"},
	} {
		e := trace.Event{Seq: uint64(i), TimeNs: int64(i) * 1000, PID: 1, TID: 1, Op: r.op, Function: r.functionName,
			Address: r.addr, Size: r.size, Stream: r.stream}
		if err := w.Write(&e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeConfig writes a best-fit pool.json with a 1 MiB region and the given predicted peak.
func writeConfig(t *testing.T, dir string, predictedPeak uint64) string {
	t.Helper()
	path := filepath.Join(dir, "pool.json")
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit,
		BestFit:    &pool.BestFitConfig{InitialBytes: 1 << 20},
		Prediction: &pool.Prediction{PeakReservedBytes: predictedPeak, PeakLiveBytes: 6000}}
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestReplayHostJSON(t *testing.T) {
	dir := t.TempDir()
	tr, cfg := writeTrace(t, dir), writeConfig(t, dir, 1<<20)
	code, out, errOut := runMain(tr, "--config", cfg, "--backend", "host", "--repeat", "2", "--verify", "--touch",
		"--max-overhead", "200", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "host" || !rep.BackendIsHost || !strings.HasPrefix(rep.BackendDescription, "backend host: measured HOST memory (mmap), not GPU") {
		t.Errorf("backend %q, host %v, description %q", rep.Backend, rep.BackendIsHost, rep.BackendDescription)
	}
	if rep.Trace.Events != 8 || rep.Trace.Allocs != 4 || rep.Trace.Frees != 3 || rep.Trace.UnknownFrees != 1 || !rep.Passed {
		t.Errorf("trace %+v, passed %v", rep.Trace, rep.Passed)
	}
	for _, m := range rep.Modes {
		if m.Allocs != 8 || m.Frees != 6 || m.FinalFrees != 2 || m.Touched != 8 || m.VerifyChecks != 8 {
			t.Errorf("%s: allocs %d, frees %d, final %d, touched %d, verified %d; want 8, 6, 2, 8, 8",
				m.Mode, m.Allocs, m.Frees, m.FinalFrees, m.Touched, m.VerifyChecks)
		}
	}
	if pl := rep.Mode(replay.ModePool); pl.PeakReservedBytes != 1<<20 || pl.PoolStats.UpstreamReserves != 1 {
		t.Errorf("pool peak reserved %d, upstream reserves %d; want %d, 1", pl.PeakReservedBytes, pl.PoolStats.UpstreamReserves, 1<<20)
	}
	if rep.Warnings[0] != "1 frees of addresses that were not live: reported, not replayed" {
		t.Errorf("warnings %q", rep.Warnings)
	}
}

func TestReplayTextSaysHostMemory(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runMain(writeTrace(t, dir), "--config", writeConfig(t, dir, 1<<20), "--backend", "host",
		"--repeat", "1", "--max-overhead", "200")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"backend host: measured HOST memory (mmap), not GPU",
		"result: PASS, no check failed (14 checks)",
		"  PASS  pool: peak reserved within 1% of the prediction: measured 1048576 bytes, predicted 1048576\n        (+0.000%)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestReplayFailedCheckExitsOne(t *testing.T) {
	dir := t.TempDir()
	// Predicted 2 MiB, measured 1 MiB: the prediction check fails; so does peak reserved <= 1.05 x live.
	code, out, errOut := runMain(writeTrace(t, dir), "--config", writeConfig(t, dir, 2<<20), "--backend", "host", "--repeat", "1")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := "replay: 2 of 14 checks failed: pool: peak reserved within 1% of the prediction; pool: peak reserved <= 1.05 x peak live: checks failed\n"
	if errOut != want {
		t.Errorf("stderr %q\nwant   %q", errOut, want)
	}
	if !strings.Contains(out, "result: FAIL, 2 of 14 checks failed") {
		t.Errorf("report lacks the verdict:\n%s", out)
	}
}

// A pool.json whose prediction counts another number of requests than the trace (12 against the
// small trace's 7: 4 allocations, 3 frees) was made for another trace, and the failed checks say so.
func TestReplayConfigOfAnotherTrace(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, 2<<20)
	cfg, err := pool.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prediction.Trace, cfg.Prediction.Events = "big.arrow", 12
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runMain(writeTrace(t, dir), "--config", path, "--backend", "host", "--repeat", "1")
	want := "replay: 2 of 14 checks failed: pool: peak reserved within 1% of the prediction; pool: peak reserved <= 1.05 x peak live" +
		" (" + path + " was made for another trace, big.arrow: 12 requests, where this one has 7): checks failed\n"
	if code != 1 || errOut != want {
		t.Errorf("exit %d, stderr %q\nwant   %q", code, errOut, want)
	}
}

// Bad input: exit 1 and one line naming the problem once.
func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	tr, cfg := writeTrace(t, dir), writeConfig(t, dir, 1<<20)
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "policy": "sizeclass",}`), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.arrow")
	paged := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass-paged.json")
	cpoolRefusal := "size_class.arena_paging: the pool inside the program has no paged arena; " +
		"write the config with `analyze --emit-config` (without --arena paged)\n"
	if !cpool.Available {
		cpoolRefusal = cpool.ErrNeedsCgo.Error() + "\n"
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{missing, "--config", cfg}, "replay: open " + missing + ": no such file or directory\n"},
		{[]string{dir, "--config", cfg}, "replay: read " + dir + ": is a directory\n"},
		{[]string{"../../../go.mod", "--config", cfg}, `replay: ../../../go.mod: byte offset 0: unknown trace format ` +
			`(first bytes "module github.co"); want an allocscope Arrow file, a PyTorch memory snapshot pickle ` +
			"(.pickle, .gz, .xz) or an RMM log CSV\n"},
		{[]string{tr, "--config", bad}, "replay: " + bad + ": line 1 col 38: invalid character '}' looking for beginning of object key string\n"},
		// An error of the replay itself names the trace once, after the program's name.
		{[]string{tr, "--config", cfg, "--backend", "host", "--host-capacity", "1MiB"}, "replay: " + tr +
			": warm up backend host: host backend: map 2097152 bytes with 0 of 1048576 mapped: out of memory\n"},
		// A config the C pool does not implement fails before the trace is read (this one is missing).
		{[]string{missing, "--config", paged, "--modes", "raw,cpool"}, "replay: " + paged + ": mode cpool: " + cpoolRefusal},
	} {
		code, out, errOut := runMain(c.args...)
		if code != 1 || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, nothing, %q", c.args, code, out, errOut, c.want)
		}
	}
}

// Wrong command lines, numbers out of range among them: exit 2, one line naming the problem and one
// naming --help, before the trace is read.
func TestReplayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tr, cfg := writeTrace(t, dir), writeConfig(t, dir, 1<<20)
	const hint = "Run 'replay --help' for usage.\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{tr}, "replay: --config is required: the pool.json to replay against (write one with analyze --emit-config)\n"},
		{[]string{tr, "--config", cfg, "--modes", "raw,fast"}, "replay: --modes: unknown mode \"fast\" (modes: raw, pool, cpool, async)\n"},
		{[]string{tr, "--config", cfg, "--repeat", "0"}, "replay: --repeat: 0 is not a positive number\n"},
		{[]string{tr, "--config", cfg, "--repeat", "x"}, "replay: --repeat: \"x\" is not an integer\n"},
		{[]string{tr, "--config", cfg, "--max-overhead", "0"}, "replay: --max-overhead: 0 is not a number above 0\n"},
		{[]string{tr, "--config", cfg, "--peak-tolerance", "1%"}, "replay: --peak-tolerance: \"1%\" is not a number\n"},
		{[]string{tr, "--config", cfg, "--host-capacity", "lots"},
			"replay: --host-capacity: \"lots\" is not a byte count (examples: 81920, 512MiB, 80GiB)\n"},
		{[]string{tr, "--config", cfg, "--leak-tolerance", "-1"},
			"replay: --leak-tolerance: \"-1\" is not a byte count (examples: 81920, 512MiB, 80GiB)\n"},
		{[]string{tr, "--config", cfg, "--backend", "tpu"}, "replay: --backend tpu: unknown backend (known: cuda, host)\n"},
		{[]string{tr, "--config", cfg, "--backend", "cuda"},
			"replay: --backend cuda: this binary was built without the cuda build tag (build it with `make replay-cuda`)\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--device", "-7"}, "replay: --device: -7 is not a device ordinal (0 or more)\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--repeat", "1000000000"}, "replay: --repeat: 1000000000 is more than 10000 repetitions\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--repeat", "-3"}, "replay: --repeat: -3 is not a positive number\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--max-overhead", "0"}, "replay: --max-overhead: 0 is not a number above 0\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--max-overhead", "NaN"}, "replay: --max-overhead: NaN is not a number above 0\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--peak-tolerance", "-0.5"}, "replay: --peak-tolerance: -0.5 is not a number above 0\n"},
		{[]string{tr, "--config", cfg, "--backend", "host", "--peak-tolerance", "+Inf"}, "replay: --peak-tolerance: +Inf is not a number above 0\n"},
		{[]string{tr, "--bogus"}, "replay: unknown flag: --bogus\n"},
		{[]string{}, "replay: accepts 1 arg(s), received 0\n"},
		{[]string{tr, tr, "--config", cfg}, "replay: accepts 1 arg(s), received 2\n"},
	} {
		code, out, errOut := runMain(c.args...)
		if code != 2 || out != "" || errOut != c.want+hint {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, nothing, %q", c.args, code, out, errOut, c.want+hint)
		}
	}
}

// Size flags take byte units; -q prints no progress, even with --progress, and the report still.
func TestReplayQuietAndByteUnits(t *testing.T) {
	dir := t.TempDir()
	tr, cfg := writeTrace(t, dir), writeConfig(t, dir, 1<<20)
	for _, quiet := range []string{"-q", "--quiet"} {
		code, out, errOut := runMain(tr, "--config", cfg, "--backend", "host", "--repeat", "1", "--max-overhead", "200",
			"--host-capacity", "1GiB", "--leak-tolerance", "1.5MB", "--progress", quiet)
		if code != 0 || errOut != "" || !strings.HasSuffix(out, "result: PASS, no check failed (14 checks)\n") {
			t.Errorf("%s: exit %d, stderr %q, stdout:\n%s\nwant 0, nothing on stderr, the report on stdout", quiet, code, errOut, out)
		}
	}
	code, _, errOut := runMain(tr, "--config", cfg, "--backend", "host", "--repeat", "1", "--max-overhead", "200", "--progress")
	if code != 0 || !strings.Contains(errOut, "replaying") {
		t.Errorf("--progress: exit %d, stderr %q; want 0 and a progress bar", code, errOut)
	}
}

// --version prints "replay <version>" on stdout and exits 0; --help has examples.
func TestReplayVersionAndHelp(t *testing.T) {
	code, stdout, stderr := runMain("--version")
	if want := "replay " + version.Version + "\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
	}
	code, stdout, _ = runMain("--help")
	if code != 0 || !strings.Contains(stdout, "\nExamples:\n  analyze -q --emit-config pool.json run.arrow && replay ") {
		t.Errorf("--help: exit %d, want 0 and an Examples section:\n%s", code, stdout)
	}
}

// TestReplayHostExpandableSegments replays the small trace with PyTorch's expandable segments on
// the host backend (a pool.Mapper): each of the trace's two streams maps one 2 MiB small-pool page,
// so the pool's peak reserved memory is the predicted 4 MiB, from two Map calls.
func TestReplayHostExpandableSegments(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "pool.json")
	cfg := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch,
		PyTorch:    &pool.PyTorchConfig{ExpandableSegments: true},
		Prediction: &pool.Prediction{PeakReservedBytes: 4 << 20, PeakLiveBytes: 6000}}
	if err := cfg.Save(cfgPath); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMain(writeTrace(t, dir), "--config", cfgPath, "--backend", "host", "--repeat", "2",
		"--verify", "--touch", "--max-overhead", "1000", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	pl := rep.Mode(replay.ModePool)
	want := pool.Stats{Allocs: 4, Frees: 4, PeakLiveBytes: 6000, PeakBlockBytes: 1024 + 3072 + 2048,
		ReservedBytes: 4 << 20, PeakReservedBytes: 4 << 20, UpstreamReserves: 2}
	if !rep.Passed || pl.PeakReservedBytes != 4<<20 || *pl.PoolStats != want || pl.VerifyChecks != 8 || pl.OutsideReserved != 0 {
		t.Errorf("passed %v (failed %+v), peak reserved %d, verified %d, outside %d\npool stats %+v\nwant       %+v",
			rep.Passed, rep.Failed(), pl.PeakReservedBytes, pl.VerifyChecks, pl.OutsideReserved, *pl.PoolStats, want)
	}
}

// TestTextReportRecordedCalls: a trace with recorded durations gets one line comparing the
// program's own calls with the pool.
func TestTextReportRecordedCalls(t *testing.T) {
	rep := replay.Report{RecordedNsPerRequest: 15300, SpeedupRecordedOverPool: 1234.5}
	var got bytes.Buffer
	if err := replay.WriteText(&got, &rep, "t.arrow", "pool.json"); err != nil {
		t.Fatal(err)
	}
	const want = "the program's own calls took 15.3 µs per request as recorded (device waits inside cudaFree\n" +
		"  included): 1234 x the pool's time\n"
	if !strings.Contains(got.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, got.String())
	}
}

// A trace without events is refused as analyze refuses it: one line, exit 1, no report. (A trace
// with events but no request to replay, only failed allocations say, is replayed: its peak check is
// skipped as "trace allocates nothing".)
func TestReplayEmptyTrace(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, 1<<20)
	empty := filepath.Join(dir, "empty.arrow")
	w, err := trace.Create(empty, trace.Info{Source: "allocscope"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		empty: "replay: " + empty + ": empty trace: no events\n",
	} {
		code, out, errOut := runMain(path, "--config", cfg, "--backend", "host")
		if code != 1 || out != "" || errOut != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1, nothing, %q", path, code, out, errOut, want)
		}
	}
}
