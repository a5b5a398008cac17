package record

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/trace"
)

// pythonForTests returns the Python 3 interpreter itself (not a launcher script such as pyenv's,
// which would run processes of its own under record) and puts testdata/python, with the stand-in
// torch and cupy packages and a user sitecustomize, on PYTHONPATH. It skips the test without python3.
func pythonForTests(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the framework capture tests run the stand-in torch and cupy packages")
	}
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	testdata, err := testcuda.TestdataDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", filepath.Join(testdata, "python"))
	t.Setenv("ALLOCSCOPE_TORCH_MAX_ENTRIES", "")
	return strings.TrimSpace(string(out))
}

// pythonScript is the path of testdata/python/name.
func pythonScript(t *testing.T, name string) string {
	t.Helper()
	testdata, err := testcuda.TestdataDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(testdata, "python", name)
}

// framePIDs renders the framework events of a trace per pid, in trace order, and checks that the
// seqs are 0..n-1 and the times never go back.
func framePIDs(t *testing.T, events []trace.Event) map[uint32][]string {
	t.Helper()
	testcuda.CheckSeqs(t, events, 0)
	byPID := map[uint32][]string{}
	for i, e := range events {
		if i > 0 && e.TimeNs < events[i-1].TimeNs {
			t.Errorf("event %d at %d ns is before event %d at %d ns", i, e.TimeNs, i-1, events[i-1].TimeNs)
		}
		if e.Layer == trace.LayerFramework {
			byPID[e.PID] = append(byPID[e.PID], testcuda.Render(&e))
		}
	}
	return byPID
}

// checkPerProcess compares the per-process event lists with want, whatever the pids.
func checkPerProcess(t *testing.T, got map[uint32][]string, want [][]string) {
	t.Helper()
	var lists []string
	for _, l := range got {
		lists = append(lists, strings.Join(l, "\n"))
	}
	var wantLists []string
	for _, l := range want {
		wantLists = append(wantLists, strings.Join(l, "\n"))
	}
	slices.Sort(lists)
	slices.Sort(wantLists)
	if !slices.Equal(lists, wantLists) {
		t.Errorf("framework events per process:\n%s\nwant:\n%s", strings.Join(lists, "\n--\n"), strings.Join(wantLists, "\n--\n"))
	}
}

// checkCaptures compares the trace's framework metadata with want, ignoring pids but requiring
// each to be a process with framework events.
func checkCaptures(t *testing.T, got []trace.FrameworkCapture, byPID map[uint32][]string, want []trace.FrameworkCapture) {
	t.Helper()
	var rendered, wantRendered []string
	for _, c := range got {
		if int64(len(byPID[c.PID])) != c.Events {
			t.Errorf("capture %+v: the trace has %d framework events of pid %d", c, len(byPID[c.PID]), c.PID)
		}
		c.PID = 0
		rendered = append(rendered, renderCapture(c))
	}
	for _, c := range want {
		wantRendered = append(wantRendered, renderCapture(c))
	}
	slices.Sort(rendered)
	slices.Sort(wantRendered)
	if !slices.Equal(rendered, wantRendered) {
		t.Errorf("framework metadata:\n%s\nwant:\n%s", strings.Join(rendered, "\n"), strings.Join(wantRendered, "\n"))
	}
}

// renderCapture renders c for a comparison, its out-of-memory state included.
func renderCapture(c trace.FrameworkCapture) string {
	b, err := json.Marshal(c)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// monotonicNow reads CLOCK_MONOTONIC, the trace's clock, in ns.
func monotonicNow(t *testing.T) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// checkMonotonic asserts that the framework events' times (PyTorch's are wall-clock microseconds,
// moved to the monotonic clock) lie within the recording, read on the monotonic clock.
func checkMonotonic(t *testing.T, events []trace.Event, before, after int64) {
	t.Helper()
	for _, e := range events {
		if e.Layer == trace.LayerFramework && (e.TimeNs < before || e.TimeNs > after) {
			t.Errorf("%s at %d ns: not within the recording's monotonic [%d, %d]", testcuda.Render(&e), e.TimeNs, before, after)
		}
	}
}

const (
	torchStdout = `parent: user sitecustomize ran: True
child: user sitecustomize ran: True
child: freed 0x7f0000000000
idle child: cuda initialized: False
parent: live 0x7f0000000400
`
	parentAlloc  = "torch.alloc alloc device framework size=1000 addr=0x7f0000000000 result=0 dev=0"
	parentAlloc2 = "torch.alloc alloc device framework size=4096 addr=0x7f0000000400 result=0 dev=0"
	parentFreeRq = "torch.free_requested free_requested device framework size=1000 addr=0x7f0000000000 result=0 dev=0"
	parentFree   = "torch.free free device framework size=1000 addr=0x7f0000000000 result=0 dev=0"
	childAlloc   = "torch.alloc alloc device framework size=2048 addr=0x7f0000000000 result=0 dev=0"
	childFreeRq  = "torch.free_requested free_requested device framework size=2048 addr=0x7f0000000000 result=0 dev=0"
	childFree    = "torch.free free device framework size=2048 addr=0x7f0000000000 result=0 dev=0"
	parentOOM    = "torch.oom oom device framework size=1099511627776 addr=0x100000 result=2 dev=0"
)

// record -- python3 torch_train.py MODE: the Python hook turns the stand-in torch's memory history
// on in the parent and in its spawned child that allocates (not in the child that never
// initializes CUDA), dumps it at sys.exit, at SIGTERM (the program still dies of it) and at an
// out-of-memory error (the observer's dump survives os._exit), and record merges exactly the
// framework-layer events (not the segment entries) per process, with their counts in the trace
// metadata; the user's sitecustomize still runs in every process, and the program's stdout and
// exit code are what they are without record.
func TestRecordCapturesTorchHistory(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	script := pythonScript(t, "torch_train.py")
	child := []string{childAlloc, childFreeRq, childFree}
	childCapture := trace.FrameworkCapture{Framework: "torch", Events: 3, Entries: 4, MaxEntries: 1000000}
	tests := []struct {
		mode     string
		exit     int
		stdout   string
		parent   []string
		captures []trace.FrameworkCapture
	}{
		{"exit", 3, torchStdout, []string{parentAlloc, parentAlloc2, parentFreeRq, parentFree},
			[]trace.FrameworkCapture{{Framework: "torch", Events: 4, Entries: 5, MaxEntries: 1000000}, childCapture}},
		{"sigterm", 128 + 15, torchStdout, []string{parentAlloc, parentAlloc2, parentFreeRq, parentFree},
			[]trace.FrameworkCapture{{Framework: "torch", Events: 4, Entries: 5, MaxEntries: 1000000}, childCapture}},
		{"oom", 5, torchStdout + "parent: CUDA out of memory. Tried to allocate 1099511627776 bytes\n",
			[]string{parentAlloc, parentAlloc2, parentFreeRq, parentFree, parentOOM},
			[]trace.FrameworkCapture{{Framework: "torch", Events: 5, Entries: 6, MaxEntries: 1000000,
				OOM: parentState(1 << 40).JSON()}, childCapture}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			alone, err := exec.Command(python, script, tc.mode).Output()
			if string(alone) != tc.stdout {
				t.Fatalf("alone: stdout %q (%v), want %q", alone, err, tc.stdout)
			}
			out := tempPath(t, "out.arrow")
			before := monotonicNow(t)
			code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", python, script, tc.mode)
			after := monotonicNow(t)
			if code != tc.exit || stdout != tc.stdout {
				t.Fatalf("record: exit code %d, stdout %q; want %d, %q (stderr %q)", code, stdout, tc.exit, tc.stdout, stderr)
			}
			if want := "allocscope: " + fmt.Sprint(len(tc.parent)+3) + " of the events are the frameworks' own allocator requests (PyTorch, CuPy)\n"; !strings.Contains(stderr, want) {
				t.Errorf("stderr %q lacks %q", stderr, want)
			}
			events, info := testcuda.ReadTrace(t, out)
			byPID := framePIDs(t, events)
			checkPerProcess(t, byPID, [][]string{tc.parent, child})
			checkCaptures(t, info.Framework, byPID, tc.captures)
			checkMonotonic(t, events, before, after)
			notExist(t, out+".raw")
		})
	}
}

// With ALLOCSCOPE_TORCH_MAX_ENTRIES=3 each process's history keeps its last 3 entries: the trace
// has those, the metadata says the history was full, and record warns once per process.
func TestRecordTorchHistoryBound(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	t.Setenv("ALLOCSCOPE_TORCH_MAX_ENTRIES", "3")
	out := tempPath(t, "out.arrow")
	code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", python, pythonScript(t, "torch_train.py"), "exit")
	if code != 3 || stdout != torchStdout {
		t.Fatalf("record: exit code %d, stdout %q (stderr %q)", code, stdout, stderr)
	}
	if n := strings.Count(stderr, "PyTorch's memory history reached its bound of 3 entries: its oldest entries were dropped (raise ALLOCSCOPE_TORCH_MAX_ENTRIES)\n"); n != 2 {
		t.Errorf("%d warnings about the full history in stderr %q, want 2", n, stderr)
	}
	events, info := testcuda.ReadTrace(t, out)
	byPID := framePIDs(t, events)
	checkPerProcess(t, byPID, [][]string{{parentAlloc2, parentFreeRq, parentFree}, {childAlloc, childFreeRq, childFree}})
	full := trace.FrameworkCapture{Framework: "torch", Events: 3, Entries: 3, MaxEntries: 3, Full: true}
	checkCaptures(t, info.Framework, byPID, []trace.FrameworkCapture{full, full})
}

// record --no-framework: no hook, so no framework events and no framework metadata; the user's
// sitecustomize runs as without record.
func TestRecordNoFramework(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	out := tempPath(t, "out.arrow")
	code, stdout, stderr := runMain(t, "-o", out, "--no-framework", "--shim", env.Shim, "--", python, pythonScript(t, "torch_train.py"), "exit")
	if code != 3 || stdout != torchStdout {
		t.Fatalf("record: exit code %d, stdout %q (stderr %q)", code, stdout, stderr)
	}
	events, info := testcuda.ReadTrace(t, out)
	if byPID := framePIDs(t, events); len(byPID) != 0 || info.Framework != nil {
		t.Errorf("framework events %v, metadata %+v; want none", byPID, info.Framework)
	}
	if strings.Contains(stderr, "frameworks' own allocator") {
		t.Errorf("stderr %q mentions framework events", stderr)
	}
}

// record -- python3 cupy_pool.py: the hook's MemoryHook logs the stand-in pool's two requests
// (requested sizes) and one free (the block's size), on the main thread.
func TestRecordCapturesCupyPool(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	out := tempPath(t, "out.arrow")
	before := monotonicNow(t)
	code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", python, pythonScript(t, "cupy_pool.py"))
	after := monotonicNow(t)
	if want := "user sitecustomize ran: True\nlive 0x7e0000000200\n"; code != 0 || stdout != want {
		t.Fatalf("record: exit code %d, stdout %q; want 0, %q (stderr %q)", code, stdout, want, stderr)
	}
	events, info := testcuda.ReadTrace(t, out)
	checkCupyPool(t, events, info)
	checkMonotonic(t, events, before, after)
	for _, e := range events {
		if e.Layer == trace.LayerFramework && e.TID != e.PID {
			t.Errorf("%s: tid %d, want the main thread's %d", testcuda.Render(&e), e.TID, e.PID)
		}
	}
}

// A CuPy log's unreadable lines (not JSON, no time, an unknown op) are counted as dropped, the rest
// converted.
func TestReadCupyLogCountsBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cupy-42.jsonl")
	lines := `{"t":5,"op":"malloc","dev":1,"size":10,"mem_size":512,"ptr":4096,"tid":43}
not json
{"op":"malloc","dev":0,"size":1,"mem_size":512,"ptr":1,"tid":1}
{"t":6,"op":"realloc","dev":0,"size":1,"mem_size":512,"ptr":1,"tid":1}
{"t":7,"op":"free","dev":1,"size":512,"mem_size":512,"ptr":4096,"tid":43}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	events, capture, err := readCupyLog(path, 42)
	if err != nil {
		t.Fatal(err)
	}
	want := trace.FrameworkCapture{PID: 42, Framework: "cupy", Events: 2, Entries: 5, Dropped: 3}
	if !reflect.DeepEqual(capture, want) {
		t.Errorf("capture %+v, want %+v", capture, want)
	}
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%d %d %s", e.TimeNs, e.TID, testcuda.Render(&e)))
	}
	wantEvents := []string{"5 43 cupy.malloc alloc device framework size=10 addr=0x1000 result=0 dev=1",
		"7 43 cupy.free free device framework size=512 addr=0x1000 result=0 dev=1"}
	if !slices.Equal(got, wantEvents) {
		t.Errorf("events %q, want %q", got, wantEvents)
	}
}

// The pid of a framework file is the number after the first dash; other names have none.
func TestFilePID(t *testing.T) {
	for name, want := range map[string]uint32{"torch-123.pickle": 123, "cupy-7.jsonl": 7, "torch-x.pickle": 0, "torch-0.pickle": 0} {
		if got, ok := filePID(filepath.Join("/d", name)); got != want || ok != (want != 0) {
			t.Errorf("filePID(%s) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

// A snapshot the hook's calls made with the real PyTorch 2.11 on an H200 (testdata/torch/README.md):
// its framework events (two blocks, one freed, an out-of-memory error) come out with the pid given,
// no stacks, and times moved from the wall clock by the offset; its segment entries stay out. The
// segments rebuilt from its history at the out-of-memory error (the cached 1 MiB segment released,
// the 3 MiB block live in its 20 MiB one) are the snapshot's own, taken there by the observer.
func TestReadTorchSnapshotFromRealPyTorch(t *testing.T) {
	testdata, err := testcuda.TestdataDir()
	if err != nil {
		t.Fatal(err)
	}
	events, capture, _, err := readTorchSnapshot(filepath.Join(testdata, "torch", "hook.snapshot.pickle"), 77, 1796414000000000000)
	if err != nil {
		t.Fatal(err)
	}
	r, err := trace.Open(filepath.Join(testdata, "torch", "hook.snapshot.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	segs := torchsnap.Of(r).Segments
	if len(segs) != 1 || len(segs[0].BlockList) != 2 || segs[0].BlockList[0].Callsite == 0 {
		t.Fatalf("the snapshot's segments %+v: want one of two blocks, the first with a stack", segs)
	}
	segs[0].BlockList[0].Callsite = 1 // the state's first callsite
	state := &torchsnap.OOM{RequestedBytes: 32 << 40, DeviceFreeBytes: 0x22d1120000, Segments: segs,
		Callsites: []string{"<module> (c.py:18)"}}
	want := trace.FrameworkCapture{PID: 77, Framework: "torch", Events: 5, Entries: 8, OOM: state.JSON()}
	if renderCapture(capture) != renderCapture(want) {
		t.Errorf("capture %s\nwant %s", renderCapture(capture), renderCapture(want))
	}
	var got []string
	for _, e := range events {
		if e.PID != 77 || e.Callsite != 0 || e.TID != 0 {
			t.Errorf("%s: pid %d, tid %d, callsite %#x; want 77, 0, 0", testcuda.Render(&e), e.PID, e.TID, e.Callsite)
		}
		got = append(got, fmt.Sprintf("%d %s", e.TimeNs, testcuda.Render(&e)))
	}
	wantEvents := []string{
		"500885193000 torch.alloc alloc device framework size=1048576 addr=0x7f559fe00000 result=0 dev=0",
		"500885393000 torch.alloc alloc device framework size=3145728 addr=0x7f55a4800000 result=0 dev=0",
		"500885413000 torch.free_requested free_requested device framework size=1048576 addr=0x7f559fe00000 result=0 dev=0",
		"500885414000 torch.free free device framework size=1048576 addr=0x7f559fe00000 result=0 dev=0",
		"501050164000 torch.oom oom device framework size=35184372088832 addr=0x22d1120000 result=2 dev=0",
	}
	if !slices.Equal(got, wantEvents) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEvents, "\n"))
	}
}

// record --keep-raw leaves the CuPy log beside the raw logs; record convert merges it the same way
// and then removes it with them.
func TestConvertMergesFrameworkFiles(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	out := tempPath(t, "out.arrow")
	code, _, stderr := runMain(t, "-o", out, "--keep-raw", "--shim", env.Shim, "--", python, pythonScript(t, "cupy_pool.py"))
	if code != 0 {
		t.Fatalf("record: exit code %d (stderr %q)", code, stderr)
	}
	logs, _ := filepath.Glob(filepath.Join(out+".raw", "cupy-*.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("raw directory holds CuPy logs %q, want 1", logs)
	}
	again := tempPath(t, "again.arrow")
	if code, _, stderr := runMain(t, "convert", out+".raw", "-o", again); code != 0 {
		t.Fatalf("convert: exit code %d (stderr %q)", code, stderr)
	}
	events, info := testcuda.ReadTrace(t, again)
	checkCupyPool(t, events, info)
	notExist(t, logs[0])
}

// checkCupyPool checks the events and the capture of testdata/python/cupy_pool.py's one process.
func checkCupyPool(t *testing.T, events []trace.Event, info trace.Info) {
	t.Helper()
	byPID := framePIDs(t, events)
	checkPerProcess(t, byPID, [][]string{{
		"cupy.malloc alloc device framework size=100 addr=0x7e0000000000 result=0 dev=0",
		"cupy.malloc alloc device framework size=1000 addr=0x7e0000000200 result=0 dev=0",
		"cupy.free free device framework size=512 addr=0x7e0000000000 result=0 dev=0",
	}})
	checkCaptures(t, info.Framework, byPID, []trace.FrameworkCapture{{Framework: "cupy", Events: 3, Entries: 3}})
}
