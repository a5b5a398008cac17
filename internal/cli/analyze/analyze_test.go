package analyze

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/tracetest"
	"github.com/allocscope/allocscope/internal/version"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// writeTrace writes a small Arrow trace: a 1000 B block, a 3 MiB block, both freed, one leak.
func writeTrace(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "t.arrow")
	writeTraceWith(t, path, trace.Info{Source: "allocscope", Command: []string{"test"}})
	return path
}

// writeTraceWith writes writeTrace's events to path with metadata info.
func writeTraceWith(t *testing.T, path string, info trace.Info) {
	t.Helper()
	events := []trace.Event{
		{Op: trace.OpAlloc, Address: 0x1000, Size: 1000},
		{Op: trace.OpAlloc, Address: 0x2000, Size: 3 << 20},
		{Op: trace.OpFree, Address: 0x1000},
		{Op: trace.OpFree, Address: 0x2000},
		{Op: trace.OpAlloc, Address: 0x3000, Size: 4096},
	}
	for i := range events {
		e := &events[i]
		e.Seq, e.TimeNs, e.PID, e.Function = uint64(i+1), int64(1000*(i+1)), 7, "cudaMalloc"
		if e.Op == trace.OpFree {
			e.Function = "cudaFree"
		}
	}
	tracetest.Write(t, path, info, events)
}

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestAnalyzeWritesEverything(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir)
	cfgPath, htmlPath := filepath.Join(dir, "pool.json"), filepath.Join(dir, "r.html")
	code, stdout, stderr := runMain("--json", "--emit-config", cfgPath, "--html", htmlPath, path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rep struct {
		Combined struct {
			Info struct {
				Source  string   `json:"source"`
				Command []string `json:"command"`
			} `json:"info"`
			Requests struct {
				PeakLiveBytes uint64 `json:"peak_live_bytes"`
				Allocs        uint64 `json:"allocs"`
			} `json:"requests"`
			Anomalies struct {
				Leaks struct {
					Count uint64 `json:"count"`
				} `json:"leaks"`
			} `json:"anomalies"`
		} `json:"combined"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if c := rep.Combined; c.Requests.PeakLiveBytes != 1000+3<<20 || c.Requests.Allocs != 3 ||
		c.Anomalies.Leaks.Count != 1 || c.Info.Source != "allocscope" || len(c.Info.Command) != 1 || c.Info.Command[0] != "test" {
		t.Errorf("report = %+v", c)
	}
	cfg, err := pool.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != pool.PolicySizeClass || cfg.Prediction == nil || cfg.Prediction.PeakLiveBytes != 1000+3<<20 {
		t.Errorf("config = %+v", cfg)
	}
	// --html keeps the timeline's detail: the page's timeline has the events behind its points.
	page, err := os.ReadFile(htmlPath)
	if n := strings.Count(string(page), `<section class="stream"`); err != nil || n != 1 ||
		!strings.Contains(string(page), `"events":true`) {
		t.Errorf("html: %v, %d sections, events in the timeline: %v", err, n, strings.Contains(string(page), `"events":true`))
	}
}

func TestAnalyzeTextAndQuiet(t *testing.T) {
	path := writeTrace(t, t.TempDir())
	code, stdout, _ := runMain("--top", "2", "--k", "1", "--capacity", "2MiB", "--explain", path)
	if code != 0 || !strings.Contains(stdout, "peak live 3 MiB in 2 blocks at seq 2") ||
		!strings.Contains(stdout, "\n  k rule: forced by --k\n") || !strings.Contains(stdout, "\n  arena rule: one region") {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}
	// Without --explain the rules are one line saying where they are.
	code, stdout, _ = runMain("--top", "2", "--k", "1", "--capacity", "2MiB", path)
	if code != 0 || strings.Contains(stdout, "k rule:") || strings.Contains(stdout, "arena rule:") ||
		!strings.Contains(stdout, "\n  (the rules that chose k, the threshold and the arena: analyze --explain)\n") {
		t.Fatalf("without --explain: exit %d, stdout:\n%s", code, stdout)
	}
	for _, quiet := range []string{"--quiet", "-q"} {
		if code, stdout, stderr := runMain(quiet, "--progress", path); code != 0 || stdout != "" || stderr != "" {
			t.Errorf("%s --progress: exit %d, stdout %q, stderr %q; want 0 and nothing", quiet, code, stdout, stderr)
		}
	}
}

// With no file, analyze reads the embedded bundled trace, from any directory.
func TestAnalyzeBundledTraceFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	code, stdout, stderr := runMain()
	if code != 0 || !strings.Contains(stdout, "trace internal/cli/analyze/bundled/pytorch-train.arrow: 1,787 events") ||
		!strings.Contains(stdout, "peak live 224 MiB in 42 blocks at seq 71") {
		t.Errorf("exit %d, stderr %q, stdout:\n%.600s", code, stderr, stdout)
	}
}

// Bad input files: exit 1 and one line naming the file and the problem, said once.
func TestAnalyzeBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.arrow")
	os.WriteFile(garbage, []byte("ARROW1\x00\x00 this is not an arrow file"), 0o644)
	empty := filepath.Join(dir, "empty.arrow")
	w, err := trace.Create(empty, trace.Info{Source: "allocscope"})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	nope := filepath.Join(dir, "nope.arrow")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{nope}, "analyze: open " + nope + ": no such file or directory\n"},
		{[]string{dir}, "analyze: read " + dir + ": is a directory\n"},
		{[]string{"../../../go.mod"}, `analyze: ../../../go.mod: byte offset 0: unknown trace format (first bytes "module github.co"); ` +
			"want an allocscope Arrow file, a PyTorch memory snapshot pickle (.pickle, .gz, .xz) or an RMM log CSV\n"},
		{[]string{empty}, "analyze: " + empty + ": empty trace: no events\n"},
	} {
		code, stdout, stderr := runMain(c.args...)
		if code != 1 || stdout != "" || stderr != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	code, _, stderr := runMain(garbage)
	if code != 1 || !strings.HasPrefix(stderr, "analyze: "+garbage+": ") || strings.Count(stderr, garbage) != 1 ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("garbage: exit %d, stderr %q; want 1 and one line naming the file once", code, stderr)
	}
}

// Wrong command lines: exit 2, one line naming the problem and one naming --help.
func TestAnalyzeUsageErrors(t *testing.T) {
	path := writeTrace(t, t.TempDir())
	const hint = "Run 'analyze --help' for usage.\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus", path}, "analyze: unknown flag: --bogus\n"},
		{[]string{"--capacity", "lots", path}, `analyze: --capacity: "lots" is not a byte count (examples: 81920, 512MiB, 80GiB)` + "\n"},
		{[]string{"--capacity", "-1GiB", path}, `analyze: --capacity: "-1GiB" is not a byte count (examples: 81920, 512MiB, 80GiB)` + "\n"},
		{[]string{"--memory", "plenty", path}, `analyze: --memory: "plenty" is not a byte count (examples: 81920, 512MiB, 80GiB)` + "\n"},
		{[]string{"--top", "many", path}, `analyze: --top: "many" is not an integer` + "\n"},
		{[]string{"--top", "-1", path}, "analyze: --top and --k must not be negative\n"},
		{[]string{"--arena", "elastic", path}, `analyze: --arena: "elastic" is not one of auto, fixed, paged` + "\n"},
		{[]string{"--json=maybe", path}, `analyze: --json: "maybe" is not true or false` + "\n"},
		{[]string{"--html"}, "analyze: flag needs an argument: --html\n"},
	} {
		code, stdout, stderr := runMain(c.args...)
		if code != 2 || stdout != "" || stderr != c.want+hint {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want+hint)
		}
	}
}

// Every size flag takes byte units.
func TestAnalyzeCapacityUnits(t *testing.T) {
	path := writeTrace(t, t.TempDir())
	for _, capacity := range []string{"1GiB", "512MiB", "81920", "1.5GB"} {
		if code, _, stderr := runMain("-q", "--capacity", capacity, path); code != 0 || stderr != "" {
			t.Errorf("--capacity %s: exit %d, stderr %q; want 0 and nothing", capacity, code, stderr)
		}
	}
}

// --html and --emit-config are checked before the trace is read: a missing trace and an output in
// a missing directory report the output.
func TestAnalyzeChecksOutputsFirst(t *testing.T) {
	dir := t.TempDir()
	missingDir := filepath.Join(dir, "missing")
	trace := filepath.Join(dir, "not-read.arrow")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--html", filepath.Join(missingDir, "r.html"), trace},
			"analyze: --html: " + missingDir + "/r.html: directory " + missingDir + ": no such file or directory\n"},
		{[]string{"--emit-config", filepath.Join(missingDir, "pool.json"), trace},
			"analyze: --emit-config: " + missingDir + "/pool.json: directory " + missingDir + ": no such file or directory\n"},
		{[]string{"--emit-config", dir, trace}, "analyze: --emit-config: " + dir + " is a directory, not a regular file\n"},
		{[]string{"--html", filepath.Join(dir, "ok.html"), "--emit-config", dir, trace},
			"analyze: --emit-config: " + dir + " is a directory, not a regular file\n"},
		{[]string{"--emit-config", "/dev/full", trace}, "analyze: --emit-config: /dev/full is a character device, not a regular file\n"},
		{[]string{"--html", "/dev/null", trace}, "analyze: --html: /dev/null is a character device, not a regular file\n"},
	} {
		code, stdout, stderr := runMain(c.args...)
		if code != 1 || stdout != "" || stderr != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the checks left %v behind", entries)
	}
}

// --version prints "analyze <version>" on stdout and exits 0; --help has examples.
func TestAnalyzeVersionAndHelp(t *testing.T) {
	code, stdout, stderr := runMain("--version")
	if want := "analyze " + version.Version + "\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
	}
	code, stdout, _ = runMain("--help")
	if code != 0 || !strings.Contains(stdout, "\nExamples:\n  analyze ") {
		t.Errorf("--help: exit %d, want 0 and an Examples section:\n%s", code, stdout)
	}
}

// TestAnalyzeArenaChoice: --arena picks the recommended pool's arena on the H200 traces where one
// region passes 1.05 x peak live: by default both get one region, the pool.json every consumer
// runs (the KV-cache trace's paged arena is only named beside it); --arena paged writes the paged
// arena, for the CNN too (457 page operations).
func TestAnalyzeArenaChoice(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		arena, trace string
		paged        bool
		peak         uint64
	}{
		{"auto", "h_torch_nocache_kvcache", false, 397603840},
		{"fixed", "h_torch_nocache_kvcache", false, 397603840},
		{"paged", "h_torch_nocache_kvcache", true, 389215232},
		{"auto", "g_torch_nocache_cnn", false, 1996013056},
		{"paged", "g_torch_nocache_cnn", true, 1937292800},
	} {
		out := filepath.Join(dir, c.arena+c.trace+".json")
		code, _, stderr := runMain("--quiet", "--arena", c.arena, "--emit-config", out, "../../../testdata/h200/"+c.trace+".arrow")
		if code != 0 {
			t.Fatalf("%s %s: exit %d: %s", c.arena, c.trace, code, stderr)
		}
		cfg, err := pool.LoadConfig(out)
		if err != nil {
			t.Fatal(err)
		}
		if (cfg.SizeClass.ArenaPaging != nil) != c.paged || cfg.Prediction.PeakReservedBytes != c.peak {
			t.Errorf("--arena %s on %s: paging %+v, predicted peak %d; want paged %v, %d", c.arena, c.trace,
				cfg.SizeClass.ArenaPaging, cfg.Prediction.PeakReservedBytes, c.paged, c.peak)
		}
	}
}

// analyze --compare: two traces side by side (JSON here: every number), one trace is a usage error.
func TestAnalyzeCompare(t *testing.T) {
	path := writeTrace(t, t.TempDir())
	code, stdout, stderr := runMain("--compare", "--json", path, path)
	if code != 0 || stderr != "" || !strings.Contains(stdout, `"before": {`) || !strings.Contains(stdout, `"pool_served": 0`) {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	code, _, stderr = runMain("--compare", path)
	if want := "analyze: --compare takes two traces (before and after), got 1\nRun 'analyze --help' for usage.\n"; code != 2 || stderr != want {
		t.Errorf("one trace: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

// analyze --compare reads the pool activity of a trace recorded with --pool (trace.Info.Pool) into
// its JSON; a trace whose pool activity does not decode is an error naming the file and the key.
func TestAnalyzeComparePoolActivity(t *testing.T) {
	dir := t.TempDir()
	before, after, bad := filepath.Join(dir, "before.arrow"), filepath.Join(dir, "after.arrow"), filepath.Join(dir, "bad.arrow")
	writeTraceWith(t, before, trace.Info{})
	writeTraceWith(t, after, trace.Info{Pool: json.RawMessage(`{"reservations":2,"peak_reserved_bytes":1048576}`)})
	writeTraceWith(t, bad, trace.Info{Pool: json.RawMessage(`{"syncs":-1}`)})
	code, stdout, stderr := runMain("--compare", "--json", before, after)
	var runs map[string]struct {
		Pool *struct {
			Reservations int64  `json:"reservations"`
			Peak         uint64 `json:"peak_reserved_bytes"`
		} `json:"pool"`
	}
	if err := json.Unmarshal([]byte(stdout), &runs); err != nil || code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q, stdout %s (%v)", code, stderr, stdout, err)
	}
	if p := runs["after"].Pool; runs["before"].Pool != nil || p == nil || p.Reservations != 2 || p.Peak != 1<<20 {
		t.Errorf("pool before %+v, after %+v; want none, then 2 reservations of 1 MiB at peak", runs["before"].Pool, p)
	}
	code, _, stderr = runMain("--compare", before, bad)
	want := "analyze: " + bad + `: schema metadata "allocscope.pool": negative count, or more barriers than syncs, in {"syncs":-1}` + "\n"
	if code != 1 || stderr != want {
		t.Errorf("bad pool activity: exit %d, stderr %q; want 1, %q", code, stderr, want)
	}
}

// The PYTORCH_CUDA_ALLOC_CONF search on the bundled trace: 43 settings, none better than the
// defaults' 240 MiB (cudaMallocAsync's pool would map 256 MiB in 32 MiB steps), so the pool.json
// has no PyTorch equivalent and --pytorch-conf prints an empty line. Within 100 MiB nothing fits:
// the report says by how much, and --emit-config exits 1 with one line and writes no file.
func TestAnalyzePyTorchSearch(t *testing.T) {
	code, stdout, stderr := runMain("--json")
	var rep struct {
		Combined struct {
			Search struct {
				Simulated int  `json:"simulated"`
				Fits      bool `json:"fits"`
				Best      []struct {
					Conf     string `json:"conf"`
					Reserved uint64 `json:"peak_reserved_bytes"`
					Saved    int64  `json:"saved_bytes"`
				} `json:"best"`
				Defaults struct {
					Reserved uint64 `json:"peak_reserved_bytes"`
				} `json:"defaults"`
			} `json:"pytorch_search"`
			Config struct {
				Equivalents struct {
					Conf string `json:"pytorch_cuda_alloc_conf"`
				} `json:"equivalents"`
			} `json:"config"`
		} `json:"combined"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v, stderr %q", code, err, stderr)
	}
	s := rep.Combined.Search
	if s.Simulated != 43 || !s.Fits || len(s.Best) != 5 || s.Best[0].Conf != "" ||
		s.Best[0].Reserved != 251658240 || s.Best[0].Saved != 0 || s.Defaults.Reserved != 251658240 ||
		rep.Combined.Config.Equivalents.Conf != "" {
		t.Errorf("search %+v, equivalent %q", s, rep.Combined.Config.Equivalents.Conf)
	}
	out := filepath.Join(t.TempDir(), "pool.json")
	code, stdout, stderr = runMain("-q", "--capacity", "100MiB", "--emit-config", out)
	want := "analyze: --emit-config " + out + " not written: the recommended pool does not fit in 104857600 bytes: " +
		"its plan needs 239627264 bytes, 134769664 more; no PYTORCH_CUDA_ALLOC_CONF setting fits in 104857600 bytes: " +
		"the closest, \"(defaults)\", needs 251658240 bytes, 146800640 more\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("within 100 MiB: exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", out, err)
	}
	if code, stdout, stderr := runMain("--pytorch-conf"); code != 0 || stdout != "\n" || stderr != "" {
		t.Errorf("--pytorch-conf: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runMain("--pytorch-conf", "--capacity", "100MiB")
	want = "analyze: no PYTORCH_CUDA_ALLOC_CONF setting fits in 104857600 bytes: the closest, " +
		"\"(defaults)\", needs 251658240 bytes, 146800640 more\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("--pytorch-conf within 100 MiB: exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
}

// A recording of PyTorch with its caching allocator and without its own requests holds its
// segments: --pytorch-conf prints nothing and exits 1 with one line that says how to record the
// requests, since a search over segments would answer for the wrong requests.
func TestAnalyzePyTorchConfOfSegments(t *testing.T) {
	code, stdout, stderr := runMain("--pytorch-conf", "../../../testdata/h200/d_torch_caching_train.arrow")
	want := "analyze: the trace holds PyTorch's segments, not its requests: no PYTORCH_CUDA_ALLOC_CONF can be " +
		"found from them; record captures PyTorch's own requests unless it ran with --no-framework (record " +
		"again without it), or run the program with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (each request a cudaMalloc)\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
}
