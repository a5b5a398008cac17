package intercept

import (
	"github.com/allocscope/allocscope/internal/testcuda"

	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// Every hooked runtime and driver function reached by plain symbols, the nested runtime -> driver call
// recorded once at the runtime layer, failures, frees carrying the allocation's size and device, the
// managed memory freed by cudaFree/cuMemFree_v2, the VMM calls, and cudaGetDriverEntryPoint(ByVersion).
func TestPlainSymbols(t *testing.T) {
	res, dir := record(t, "plain")
	updateFuzzSeed(t, "plain", dir)
	if res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", res.ExitCode)
	}
	if !strings.Contains(res.Stdout, "cudaFree(NULL) = 0 errno 1234\n") || !strings.Contains(res.Stdout, "errno 0x5eed\n") {
		t.Errorf("errno not passed through:\n%s", res.Stdout)
	}
	events, sum := convertDir(t, dir)
	checkEvents(t, events, testcuda.PlainEvents)
	checkSeqs(t, events, 0)
	pid := events[0].PID
	for i := range events {
		e := &events[i]
		if e.PID != pid || e.TID != pid {
			t.Errorf("event %d: pid %d tid %d, want %d (one thread)", i, e.PID, e.TID, pid)
		}
		if e.Callsite == 0 || e.TimeNs <= 0 || e.DurationNs < 0 {
			t.Errorf("event %d: callsite %#x time %d duration %d", i, e.Callsite, e.TimeNs, e.DurationNs)
		}
		if i > 0 && e.TimeNs < events[i-1].TimeNs {
			t.Errorf("event %d: time %d before the previous event's %d", i, e.TimeNs, events[i-1].TimeNs)
		}
	}
	// Live device bytes peak after the 3D allocation: 1000+4096+512+5120+4096 (+2048 freed before).
	want := Summary{Events: 55, Processes: 1, Devices: []int32{0, 1}, PeakLiveBytes: 1000 + 4096 + 512 + 5120 + 4096 + 2097152}
	checkSummary(t, sum, want)
	if got, err := Command(dir); err != nil || len(got) != 1 || filepath.Base(got[0]) != "plain" {
		t.Errorf("Command = %q, %v; want [.../../plain]", got, err)
	}
}

func checkSummary(t *testing.T, got, want Summary) {
	t.Helper()
	if got.Events != want.Events || got.Processes != want.Processes || !slices.Equal(got.Devices, want.Devices) ||
		got.PeakLiveBytes != want.PeakLiveBytes || len(got.Warnings) != len(want.Warnings) || got.Lost != want.Lost ||
		(want.ShimLoads != 0 && got.ShimLoads != want.ShimLoads) {
		t.Errorf("summary %+v, want %+v", got, want)
	}
	if got.AllocCallNs <= 0 {
		t.Errorf("summary: time in calls %d ns", got.AllocCallNs)
	}
}

// The way an nvcc default build (static cudart) reaches the driver: dlsym cuGetProcAddress_v2, then
// "cuGetProcAddress" through itself (v2 for 12080, v1 for 11030), ptsz variants by flag.
func TestStaticCudartResolution(t *testing.T) {
	res, dir := record(t, "static_cudart")
	updateFuzzSeed(t, "static_cudart", dir)
	if res.ExitCode != 11 {
		t.Errorf("exit code %d, want 11", res.ExitCode)
	}
	// The wrappers must call what cuGetProcAddress handed out (30 calls), not the exported symbols (1).
	if !strings.Contains(res.Stdout, "driver calls: exported 1, through proc address 30\n") {
		t.Errorf("wrong real functions called:\n%s", res.Stdout)
	}
	events, sum := convertDir(t, dir)
	checkEvents(t, events, testcuda.StaticCudartEvents)
	checkSeqs(t, events, 0)
	checkSummary(t, sum, Summary{Events: 18, Processes: 1, Devices: []int32{0}, PeakLiveBytes: 15 << 20})
}

// CuPy's way: dlopen libcuda and dlsym the versioned names; symbols stay invisible where they were.
func TestCupyStyleDlsym(t *testing.T) {
	res, dir := record(t, "cupy_style")
	if res.ExitCode != 13 {
		t.Errorf("exit code %d, want 13", res.ExitCode)
	}
	for _, line := range []string{"before dlopen: cudaMalloc absent, cuMemAlloc_v2 absent\n", "RTLD_NEXT malloc: same as default\n",
		"after dlopen: cuMemAlloc_v2 absent\n", "same pointer twice: yes\n", "missing symbol: null\n",
		"driver calls: exported 8, through proc address 0\n"} {
		if !strings.Contains(res.Stdout, line) {
			t.Errorf("stdout lacks %q:\n%s", line, res.Stdout)
		}
	}
	events, sum := convertDir(t, dir)
	checkEvents(t, events, testcuda.CupyStyleEvents)
	checkSeqs(t, events, 0)
	checkSummary(t, sum, Summary{Events: 8, Processes: 1, Devices: []int32{0}, PeakLiveBytes: 6064})
}

// 16 threads at once (32000 events, across a log chunk boundary): every call once, no nested driver
// event, each thread's frees paired with its allocations, one seq per event.
func TestSixteenThreads(t *testing.T) {
	const threads, iterations = 16, 1000
	res, dir := record(t, "threads")
	if res.ExitCode != 17 || res.Stdout != "threads 16, iterations 1000, failures 0\n" {
		t.Errorf("exit %d, stdout %q", res.ExitCode, res.Stdout)
	}
	events, sum := convertDir(t, dir)
	if len(events) != 2*threads*iterations {
		t.Fatalf("%d events, want %d", len(events), 2*threads*iterations)
	}
	checkSeqs(t, events, 0)
	type open struct {
		addr, size uint64
		n          int
		sizes      map[uint64]bool
	}
	perThread := map[uint32]*open{}
	for i := range events {
		e := &events[i]
		th := perThread[e.TID]
		if th == nil {
			th = &open{sizes: map[uint64]bool{}}
			perThread[e.TID] = th
		}
		switch {
		case e.Function == "cudaMalloc" && e.OK() && th.addr == 0:
			th.addr, th.size = e.Address, e.Size
			th.sizes[e.Size] = true
		case e.Function == "cudaFree" && e.OK() && e.Address == th.addr && e.Size == th.size && th.addr != 0:
			th.addr, th.size = 0, 0
			th.n++
		default:
			t.Fatalf("event %d (seq %d, tid %d): %s out of order for its thread", i, e.Seq, e.TID, testcuda.Render(e))
		}
	}
	if len(perThread) != threads {
		t.Errorf("%d threads seen, want %d", len(perThread), threads)
	}
	bases := map[uint64]bool{}
	for tid, th := range perThread {
		if th.n != iterations || len(th.sizes) != 3 {
			t.Errorf("thread %d: %d pairs, sizes %v; want %d pairs of 3 sizes", tid, th.n, th.sizes, iterations)
		}
		base := slices.Min(slices.Collect(mapKeys(th.sizes)))
		if base%256 != 0 || base < 256 || base > 256*threads || !th.sizes[base+1] || !th.sizes[base+2] {
			t.Errorf("thread %d: sizes %v", tid, th.sizes)
		}
		bases[base] = true
	}
	if len(bases) != threads {
		t.Errorf("%d distinct size bases, want %d", len(bases), threads)
	}
	if sum.Events != 32000 || sum.Processes != 1 || !slices.Equal(sum.Devices, []int32{0}) {
		t.Errorf("summary %+v", sum)
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A forked child logs to its own file and an exec'd child loads the shim again through LD_PRELOAD.
func TestForkAndExec(t *testing.T) {
	res, dir := record(t, "forkexec")
	wantOut := "parent: 0x200000000000 0x200000000200 0x200000000400\n" +
		"exec'd child: 0x200000000000 0x200000006000\nchild exit 23\nparent done\n"
	if res.ExitCode != 19 || res.Stdout != wantOut {
		t.Errorf("exit %d, stdout:\n%s", res.ExitCode, res.Stdout)
	}
	events, sum := convertDir(t, dir)
	checkSeqs(t, events, 0)
	if sum.Processes != 3 || sum.Events != 19 {
		t.Fatalf("summary %+v, want 3 processes and 19 events", sum)
	}
	parent, child := events[0].PID, events[3].PID
	if parent == child {
		t.Fatalf("child events carry the parent's pid %d", parent)
	}
	checkEvents(t, events, testcuda.ForkExecEvents)
	for i := range events {
		wantPID := parent
		if i >= 3 && i < 14 {
			wantPID = child
		}
		if events[i].PID != wantPID {
			t.Errorf("event %d: pid %d, want %d", i, events[i].PID, wantPID)
		}
	}
	// Three files: the parent's, the forked child's, and the exec'd image's (same pid, new file).
	headers := logHeaders(t, dir)
	var got []string
	for _, h := range headers {
		role := "parent"
		switch {
		case h.PID == child && len(h.Command) == 2 && h.Command[1] == "exec":
			role = "exec"
		case h.PID == child:
			role = "fork"
		}
		if role != "parent" && h.PPID != parent {
			t.Errorf("%s log: ppid %d, want %d", role, h.PPID, parent)
		}
		got = append(got, role)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"exec", "fork", "parent"}) {
		t.Errorf("logs of %v, want exec, fork, parent", got)
	}
	if cmd, err := Command(dir); err != nil || len(cmd) != 1 || filepath.Base(cmd[0]) != "forkexec" {
		t.Errorf("Command = %q, %v; want the parent's", cmd, err)
	}
}

func logHeaders(t *testing.T, dir string) []rawHeader {
	t.Helper()
	paths, err := rawLogPaths(dir)
	if err != nil {
		t.Fatal(err)
	}
	var hs []rawHeader
	for _, p := range paths {
		lf, err := openLogFile(p)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, lf.log.header)
		lf.close()
	}
	return hs
}

// Killed by SIGKILL after 20000 events (two log chunks): every event is recovered.
func TestSIGKILLRecovers(t *testing.T) {
	const n = 10000
	res, dir := record(t, "killed")
	if res.Signal != syscall.SIGKILL || res.Stdout != "ready\n" {
		t.Fatalf("signal %v, stdout %q; want SIGKILL and ready", res.Signal, res.Stdout)
	}
	events, sum := convertDir(t, dir)
	if len(events) != 2*n || len(sum.Warnings) != 0 {
		t.Fatalf("%d events (warnings %q), want %d", len(events), sum.Warnings, 2*n)
	}
	checkSeqs(t, events, 0)
	for i := 0; i < n; i++ {
		a, f := &events[i], &events[n+i]
		size := uint64(512 * (i%16 + 1))
		if a.Function != "cudaMalloc" || a.Size != size || !a.OK() || f.Function != "cudaFree" ||
			f.Address != a.Address || f.Size != size || !f.OK() {
			t.Fatalf("pair %d: %s / %s", i, testcuda.Render(a), testcuda.Render(f))
		}
	}
}

// An unwritable log directory: one line on stderr, the program's output and exit code unchanged.
func TestUnwritableLogDir(t *testing.T) {
	env(t)
	base := runProgram(t, "", "plain")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runProgram(t, filepath.Join(file, "logs"), "plain")
	if got.Stdout != base.Stdout || got.ExitCode != base.ExitCode || got.ExitCode != 7 {
		t.Errorf("exit %d (want %d), stdout differs: %v", got.ExitCode, base.ExitCode, got.Stdout != base.Stdout)
	}
	re := regexp.MustCompile(`^allocscope: cannot write log ` + regexp.QuoteMeta(file) +
		`/logs/[0-9]+-[0-9]+\.alog: Not a directory; recording stopped\n$`)
	if !re.MatchString(got.Stderr) {
		t.Errorf("stderr %q, want one line matching %s", got.Stderr, re)
	}
}

// Without ALLOCSCOPE_LOG_DIR the preloaded shim records nothing and changes nothing.
func TestNoLogDirIsInvisible(t *testing.T) {
	env(t)
	for _, name := range []string{"plain", "static_cudart", "cupy_style"} {
		base := runProgram(t, "", name)
		cmd := runProgramPreloadOnly(t, name)
		if cmd.Stdout != base.Stdout || cmd.ExitCode != base.ExitCode || cmd.Stderr != base.Stderr {
			t.Errorf("%s: preloaded without a log dir behaves differently:\n%s\n%s", name, cmd.Stdout, cmd.Stderr)
		}
	}
}

func runProgramPreloadOnly(t *testing.T, name string) result {
	t.Helper()
	t.Setenv("LD_PRELOAD", env(t).Shim)
	t.Setenv(EnvLogDir, "")
	return runProgram(t, "", name)
}

// The trace written through the real trace.Writer reads back as the same events.
func TestConvertWritesTrace(t *testing.T) {
	_, dir := record(t, "plain")
	want, _ := convertDir(t, dir)
	out := filepath.Join(t.TempDir(), "run.arrow")
	w, err := trace.Create(out, trace.Info{Source: "allocscope", Command: []string{"plain"}})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Convert(dir, w, ConvertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if sum.Events != int64(len(want)) {
		t.Fatalf("Convert wrote %d events, want %d", sum.Events, len(want))
	}
	r, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []trace.Event
	for {
		batch, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, batch...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace read back differs: %d events, want %d", len(got), len(want))
	}
}

// A log that cannot grow (the file-size limit stands in for a full disk: the chunk allocation fails
// with EFBIG instead of ENOSPC, through the same path) stops recording with one line on stderr, and the
// program's output and exit code stay the same.
func TestLogCannotGrow(t *testing.T) {
	e := env(t)
	base := runProgram(t, "", "plain")
	logDir := filepath.Join(t.TempDir(), "logs")
	if err := PrepareLogDir(logDir); err != nil {
		t.Fatal(err)
	}
	// ulimit -f 16: 16 blocks at most; trap "" XFSZ: the write fails instead of killing the program.
	cmd := exec.Command("sh", "-c", `ulimit -f 16; trap "" XFSZ; exec "$0"`, e.Prog("plain"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+e.LibDir, "LD_PRELOAD="+e.Shim, EnvLogDir+"="+logDir)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 7 || stdout.String() != base.Stdout {
		t.Errorf("exit %v (want 7), stdout same as without the shim: %v", err, stdout.String() == base.Stdout)
	}
	re := regexp.MustCompile(`^allocscope: cannot write log ` + regexp.QuoteMeta(logDir) +
		`/[0-9]+-[0-9]+\.lanes: File too large; recording stopped\n$`)
	if !re.MatchString(stderr.String()) {
		t.Errorf("stderr %q, want one line matching %s", stderr.String(), re)
	}
}
