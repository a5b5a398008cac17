package analyze

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// writeTrace writes a small Arrow trace: a 1000 B block, a 3 MiB block, both freed, one leak.
func writeTrace(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "t.arrow")
	w, err := trace.Create(path, trace.Info{Source: "allocscope", Command: []string{"test"}})
	if err != nil {
		t.Fatal(err)
	}
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
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
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
	page, err := os.ReadFile(htmlPath)
	if err != nil || strings.Count(string(page), "<svg") != 4 {
		t.Errorf("html: %v, %d charts", err, strings.Count(string(page), "<svg"))
	}
}

func TestAnalyzeTextAndQuiet(t *testing.T) {
	path := writeTrace(t, t.TempDir())
	code, stdout, _ := runMain("--top", "2", "--k", "1", "--capacity", "2MiB", path)
	if code != 0 || !strings.Contains(stdout, "peak live 3 MiB in 2 blocks at seq 2") ||
		!strings.Contains(stdout, "k rule: forced by --k") {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}
	if code, stdout, _ = runMain("--quiet", path); code != 0 || stdout != "" {
		t.Errorf("--quiet: exit %d, stdout %q", code, stdout)
	}
}

// With no file, analyze reads the embedded bundled trace, from any directory.
func TestAnalyzeBundledTraceFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	code, stdout, stderr := runMain()
	if code != 0 || !strings.Contains(stdout, "trace testdata/pytorch-train.arrow: 1,787 events") ||
		!strings.Contains(stdout, "peak live 224 MiB in 42 blocks at seq 71") {
		t.Errorf("exit %d, stderr %q, stdout:\n%.600s", code, stderr, stdout)
	}
}

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
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(dir, "nope.arrow")}, "nope.arrow"},
		{[]string{garbage}, "garbage.arrow"},
		{[]string{empty}, "empty.arrow: empty trace: no events"},
		{[]string{"--capacity", "lots", garbage}, `--capacity: "lots" is not a byte count`},
		{[]string{"--arena", "elastic", garbage}, `--arena: "elastic" is not one of auto, fixed, paged`},
	} {
		code, stdout, stderr := runMain(c.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || stdout != "" || len(lines) != 1 || !strings.HasPrefix(stderr, "analyze: ") ||
			!strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "81920": 81920, "512MiB": 512 << 20, "80GiB": 80 << 30,
		"1.5 GB": 1_500_000_000, "4kib": 4096} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "GiB", "1e400", "x"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) succeeded", bad)
		}
	}
}

// FuzzParseBytes: --capacity values never panic, and plain integers read back as themselves.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"", "81920", "512MiB", "80GiB", "1.5 GB", "-1", "1e400", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseBytes(s)
		// Integers read back exactly up to 2^53 (float64's exact range).
		if v, perr := strconv.ParseUint(s, 10, 64); perr == nil && v <= 1<<53 && (err != nil || n != v) {
			t.Fatalf("parseBytes(%q) = %d, %v; want %d", s, n, err, v)
		}
	})
}

// TestAnalyzeArenaChoice: --arena picks the recommended pool's arena on the H200 traces where one
// region passes 1.05 x peak live: by default the KV-cache trace gets a paged arena and the CNN
// (too many page operations) one region; --arena fixed and --arena paged override that.
func TestAnalyzeArenaChoice(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		arena, trace string
		paged        bool
		peak         uint64
	}{
		{"auto", "h_torch_nocache_kvcache", true, 389215232},
		{"fixed", "h_torch_nocache_kvcache", false, 397603840},
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
