package record

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/buildid"
	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/internal/tracetest"
	"github.com/allocscope/allocscope/internal/version"
	"github.com/allocscope/allocscope/trace"
)

// record -o out.arrow --shim SHIM -- PROG: record exits with the program's exit code, leaves its
// stdout and stderr as they are, writes exactly the events the intercept tests expect with the
// trace metadata, prints the summary with exact numbers, and removes its raw logs.
func TestRecordPrograms(t *testing.T) {
	env := testcuda.Build(t)
	driver, gpus := nvidiaInfo("/proc/driver/nvidia")
	host, _ := os.Hostname()
	tests := []struct {
		prog    string
		exit    int
		events  string
		summary string
	}{
		{"plain", 7, testcuda.PlainEvents,
			"allocscope: 55 events from 1 process(es), device(s) 0,1, peak live 2 MiB"},
		{"static_cudart", 11, testcuda.StaticCudartEvents,
			"allocscope: 18 events from 1 process(es), device(s) 0, peak live 15 MiB"},
		{"cupy_style", 13, testcuda.CupyStyleEvents,
			"allocscope: 8 events from 1 process(es), device(s) 0, peak live 5.9 KiB"},
		{"forkexec", 19, testcuda.ForkExecEvents,
			"allocscope: 19 events from 3 process(es), device(s) 0, peak live 40.6 KiB"},
	}
	for _, tc := range tests {
		t.Run(tc.prog, func(t *testing.T) {
			base := env.Run(t, "", tc.prog)
			if base.ExitCode != tc.exit {
				t.Fatalf("%s alone exits with %d, want %d", tc.prog, base.ExitCode, tc.exit)
			}
			out := tempPath(t, "out.arrow")
			before := time.Now()
			code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", env.Prog(tc.prog))
			after := time.Now()
			if code != tc.exit {
				t.Errorf("record exit code %d, want the program's %d", code, tc.exit)
			}
			if stdout != base.Stdout {
				t.Errorf("stdout under record differs:\n--- alone\n%s--- under record\n%s", base.Stdout, stdout)
			}
			if !strings.HasPrefix(stderr, base.Stderr) {
				t.Errorf("stderr %q does not start with the program's own %q", stderr, base.Stderr)
			}
			checkSummary(t, strings.TrimPrefix(stderr, base.Stderr), tc.summary, out, true)
			events, info := testcuda.ReadTrace(t, out)
			testcuda.CheckEvents(t, events, tc.events)
			testcuda.CheckSeqs(t, events, 0)
			want := trace.Info{FormatVersion: trace.FormatVersion, Source: "allocscope",
				Command: []string{env.Prog(tc.prog)}, Host: host, RecorderVersion: version.Version,
				DriverVersion: driver, GPUNames: gpus}
			got := info
			got.StartTime = time.Time{}
			if !infoEqual(got, want) {
				t.Errorf("trace info %+v, want %+v", got, want)
			}
			if info.StartTime.Before(before.Truncate(time.Second)) || info.StartTime.After(after) {
				t.Errorf("start time %v not within the run [%v, %v]", info.StartTime, before, after)
			}
			notExist(t, out+".raw")
		})
	}
}

func infoEqual(a, b trace.Info) bool {
	return a.FormatVersion == b.FormatVersion && a.Source == b.Source && slices.Equal(a.Command, b.Command) &&
		a.Host == b.Host && a.StartTime.Equal(b.StartTime) && a.RecorderVersion == b.RecorderVersion &&
		a.DriverVersion == b.DriverVersion && slices.Equal(a.GPUNames, b.GPUNames)
}

// Without -o the trace is allocscope-YYYYMMDD-HHMMSS.arrow in the current directory, named after the
// local start time; without --shim the embedded shim is compiled into the cache directory.
func TestDefaultOutputAndShim(t *testing.T) {
	env := testcuda.Build(t)
	dir, cache := t.TempDir(), t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_CACHE_HOME", cache)
	before := time.Now().Truncate(time.Second)
	code, _, stderr := runMain(t, "--", env.Prog("cupy_style"))
	after := time.Now()
	if code != 13 {
		t.Errorf("exit code %d, want 13", code)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("current directory holds %v (%v), want one trace", entries, err)
	}
	name := entries[0].Name()
	m := regexp.MustCompile(`^allocscope-([0-9]{8}-[0-9]{6})\.arrow$`).FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("trace named %q, want allocscope-YYYYMMDD-HHMMSS.arrow", name)
	}
	stamp, err := time.ParseInLocation("20060102-150405", m[1], time.Local)
	if err != nil || stamp.Before(before) || stamp.After(after) {
		t.Errorf("name's time %v (%v) not within the run [%v, %v]", stamp, err, before, after)
	}
	checkSummary(t, stderr, "allocscope: 8 events from 1 process(es), device(s) 0, peak live 5.9 KiB", name, true)
	events, _ := testcuda.ReadTrace(t, filepath.Join(dir, name))
	testcuda.CheckEvents(t, events, testcuda.CupyStyleEvents)
	shims, _ := filepath.Glob(filepath.Join(cache, "allocscope", "*", "liballocscope.so"))
	if len(shims) != 1 {
		t.Errorf("shim cache holds %v, want one compiled shim", shims)
	}
}

// A relative -o names the raw logs' directory relative to record's directory, also for a program
// that changes its own before it allocates (a daemon, a launcher): its 8 events are recorded.
func TestRelativeOutputAndChdir(t *testing.T) {
	env := testcuda.Build(t)
	t.Chdir(t.TempDir())
	code, _, stderr := runMain(t, "-q", "-o", "rel.arrow", "--shim", env.Shim, "--", "/bin/sh", "-c",
		"cd / && exec "+env.Prog("cupy_style"))
	if code != 13 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 13, nothing", code, stderr)
	}
	events, _ := testcuda.ReadTrace(t, "rel.arrow")
	testcuda.CheckEvents(t, events, testcuda.CupyStyleEvents)
}

// A program that kills itself with SIGKILL: record exits with 128+9 and the trace holds the 20000
// events logged before the kill, allocations paired with frees.
func TestKilledProgram(t *testing.T) {
	const n = 10000
	env := testcuda.Build(t)
	out := tempPath(t, "killed.arrow")
	code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", env.Prog("killed"))
	if code != 137 { // 128 + SIGKILL
		t.Errorf("exit code %d, want 137", code)
	}
	if stdout != "ready\n" {
		t.Errorf("stdout %q, want ready", stdout)
	}
	// 625 rounds of 16 sizes 512..8192 are live at once: 625*512*136 bytes.
	checkSummary(t, stderr, "allocscope: 20,000 events from 1 process(es), device(s) 0, peak live 41.5 MiB", out, true)
	events, _ := testcuda.ReadTrace(t, out)
	if len(events) != 2*n {
		t.Fatalf("%d events, want %d", len(events), 2*n)
	}
	testcuda.CheckSeqs(t, events, 0)
	for i := 0; i < n; i++ {
		a, f := &events[i], &events[n+i]
		size := uint64(512 * (i%16 + 1))
		if a.Function != "cudaMalloc" || a.Size != size || !a.OK() || f.Function != "cudaFree" ||
			f.Address != a.Address || f.Size != size || !f.OK() {
			t.Fatalf("pair %d: %s / %s", i, testcuda.Render(a), testcuda.Render(f))
		}
	}
}

// SIGINT and SIGTERM sent to record (stdin not a terminal) reach the program, which reports the
// signal and exits with 42, and record exits with 42 after writing the trace.
func TestSignalForwarding(t *testing.T) {
	env := testcuda.Build(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			out := tempPath(t, "signals.arrow")
			p := startRecord(t, "-o", out, "--shim", env.Shim, "--", env.Prog("signals"))
			if line := p.readLine(t); line != "ready\n" {
				t.Fatalf("first line %q, want ready", line)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code, rest := p.wait(t)
			if want := "got signal " + strconv.Itoa(int(sig)) + "\n"; rest != want {
				t.Errorf("program printed %q after ready, want %q (stderr %q)", rest, want, p.stderr.String())
			}
			if code != 42 {
				t.Errorf("record exit code %d, want 42", code)
			}
			checkSummary(t, p.stderr.String(),
				"allocscope: 6 events from 1 process(es), device(s) 0, peak live 6 KiB", out, true)
			events, _ := testcuda.ReadTrace(t, out)
			testcuda.CheckEvents(t, events, testcuda.SignalsEvents)
		})
	}
}

// record saves each process's executable mappings in the trace (trace.Info.Modules), so that
// analyze names the code behind a callsite: testdata/progs/leaky.c's two leaks come from
// leak_small and leak_large, at the lines of their cudaMalloc calls.
func TestRecordNamesCallsites(t *testing.T) {
	env := testcuda.Build(t)
	out, r := recordOpen(t, env, "leaky.arrow", env.Prog("leaky"))
	defer r.Close()
	if len(r.Info().Modules) == 0 {
		t.Fatal("the trace has no modules")
	}
	names := mallocCallsites(t, r)
	want := []string{"leak_small (leaky.c:8)", "leak_large (leaky.c:14)"}
	if !slices.Equal(names, want) {
		t.Errorf("callsites %q, want %q", names, want)
	}
	rep, err := analysis.Analyze([]analysis.Input{{Name: out, Open: func() (analysis.Source, error) { return trace.Open(out) }}},
		analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var leaks []string
	for _, e := range rep.Combined.Anomalies.Leaks.Events {
		leaks = append(leaks, e.Callsite)
	}
	if want := []string{"leak_small (leaky.c:8)", "leak_large (leaky.c:14)"}; !slices.Equal(leaks, want) {
		t.Errorf("analyze's leaks from %q, want %q", leaks, want)
	}
}

// A library loaded with dlopen and unloaded with dlclose before the program exits
// (testdata/progs/plugin.c) is still named: the shim saves the mappings at the dlclose. Every module
// carries its file's build ID.
func TestRecordNamesCallsitesOfUnloadedLibraries(t *testing.T) {
	env := testcuda.Build(t)
	lib := env.Preload("plugin")
	_, r := recordOpen(t, env, "plugin.arrow", env.Prog("plugin"), lib)
	defer r.Close()
	names := mallocCallsites(t, r)
	if len(names) != 1 || !strings.HasPrefix(names[0], "plugin_alloc+0x") || !strings.HasSuffix(names[0], " (libplugin.so)") {
		t.Errorf("callsites %q, want plugin_alloc+0x… (libplugin.so)", names)
	}
	for _, m := range r.Info().Modules {
		if want := buildid.Of(m.Path); m.BuildID != want || (m.Path == lib && want == "") {
			t.Errorf("module %s: build ID %q, want %q (and one for the plugin)", m.Path, m.BuildID, want)
		}
	}
}

// A module whose file has another build ID than the recorded one (rebuilt since) is not named by
// its symbols, which would lie: the callsite says so.
func TestRecordCallsitesOfRebuiltFiles(t *testing.T) {
	env := testcuda.Build(t)
	_, r := recordOpen(t, env, "leaky.arrow", env.Prog("leaky"))
	info := r.Info()
	events := readAll(t, r)
	r.Close()
	for i := range info.Modules {
		if info.Modules[i].Path == env.Prog("leaky") {
			info.Modules[i].BuildID = "00"
		}
	}
	again := tempPath(t, "rebuilt.arrow")
	tracetest.Write(t, again, info, events)
	r2, err := trace.Open(again)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	for _, e := range events {
		if e.Function == "cudaMalloc" {
			if c, _ := r2.Callsite(e.PID, e.Callsite); !strings.HasPrefix(c.Label, "leaky+0x") ||
				!strings.HasSuffix(c.Label, " (rebuilt since)") {
				t.Errorf("callsite %+v, want leaky+0x… (rebuilt since)", c)
			}
		}
	}
}

// readAll reads every event of r.
func readAll(t *testing.T, r *trace.Reader) []trace.Event {
	t.Helper()
	var events []trace.Event
	for {
		batch, err := r.Next()
		events = append(events, batch...)
		if err == io.EOF {
			return events
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// mallocCallsites returns the callsite labels of the cudaMalloc events of r, in order ("" for one
// not named).
func mallocCallsites(t *testing.T, r *trace.Reader) []string {
	t.Helper()
	var names []string
	for _, e := range readAll(t, r) {
		if e.Function == "cudaMalloc" {
			c, _ := r.Callsite(e.PID, e.Callsite)
			names = append(names, c.Label)
		}
	}
	return names
}

// recordOpen records the program (command line cmd) quietly under env's shim into a trace named
// name in t's temp dir, and returns the trace's path and an open reader of it.
func recordOpen(t *testing.T, env *testcuda.Env, name string, cmd ...string) (string, *trace.Reader) {
	t.Helper()
	out := tempPath(t, name)
	args := append([]string{"-q", "-o", out, "--shim", env.Shim, "--"}, cmd...)
	if code, _, stderr := runMain(t, args...); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	r, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, r
}
