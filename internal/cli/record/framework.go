package record

import (
	"bufio"
	"cmp"
	_ "embed" // the Python startup hook
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/allocscope/allocscope/internal/torchhist"
	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/trace"
)

// pythonHook is the sitecustomize module that makes every Python process of the recording capture
// PyTorch's memory history and CuPy's pool requests (pyhook/sitecustomize.py).
//
//go:embed pyhook/sitecustomize.py
var pythonHook []byte

// envPythonPath is the variable the Python hook's directory is put first in.
const envPythonPath = "PYTHONPATH"

// preparePythonHook writes the Python hook into a new private directory, to put first on
// PYTHONPATH; remove it with os.RemoveAll once the program is done.
func preparePythonHook() (string, error) {
	dir, err := os.MkdirTemp("", "allocscope-python-*")
	if err != nil {
		return "", fmt.Errorf("python hook: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), pythonHook, 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("python hook: %w", err)
	}
	return dir, nil
}

// pythonPathValue puts dir before an existing PYTHONPATH value.
func pythonPathValue(existing, dir string) string {
	if existing == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + existing
}

// frameworkFiles are the patterns of the files the Python hook writes into the raw log directory.
var frameworkFiles = []string{"torch-*.pickle", "torch-*.json", "torch-*.tmp", "cupy-*.jsonl"}

// frameworkCapture is what the Python hook left in a raw log directory, ready to merge.
type frameworkCapture struct {
	events   []trace.Event // by time on the raw logs' clock
	captures []trace.FrameworkCapture
	warnings []string
}

// readFramework reads the PyTorch snapshots and CuPy logs of dir. offsets are the raw logs'
// wall-minus-monotonic clock differences by pid (intercept.Logs.ClockOffsets): PyTorch's times are
// wall-clock microseconds. A file that cannot be read is skipped with a warning.
func readFramework(dir string, offsets map[uint32]int64) frameworkCapture {
	var fc frameworkCapture
	torch, _ := filepath.Glob(filepath.Join(dir, "torch-*.pickle"))
	cupy, _ := filepath.Glob(filepath.Join(dir, "cupy-*.jsonl"))
	for _, path := range sortByPID(torch) {
		pid, _ := filePID(path)
		events, capture, oomNote, err := readTorchSnapshot(path, pid, clockOffset(offsets, pid))
		if err != nil {
			fc.warnings = append(fc.warnings, fmt.Sprintf("%s: PyTorch snapshot skipped: %v", path, err))
			continue
		}
		fc.add(events, capture)
		if capture.Full {
			fc.warnings = append(fc.warnings, fmt.Sprintf("pid %d: PyTorch's memory history reached its bound of %d "+
				"entries: its oldest entries were dropped (raise ALLOCSCOPE_TORCH_MAX_ENTRIES)", pid, capture.MaxEntries))
		}
		if oomNote != "" {
			fc.warnings = append(fc.warnings, fmt.Sprintf("pid %d: %s", pid, oomNote))
		}
	}
	for _, path := range sortByPID(cupy) {
		pid, _ := filePID(path)
		events, capture, err := readCupyLog(path, pid)
		if err != nil {
			fc.warnings = append(fc.warnings, fmt.Sprintf("%s: CuPy log skipped: %v", path, err))
			continue
		}
		fc.add(events, capture)
		if capture.Dropped > 0 {
			fc.warnings = append(fc.warnings, fmt.Sprintf("%s: %d line(s) unreadable, skipped", path, capture.Dropped))
		}
	}
	slices.SortStableFunc(fc.events, func(a, b trace.Event) int { return cmp.Compare(a.TimeNs, b.TimeNs) })
	slices.SortStableFunc(fc.captures, func(a, b trace.FrameworkCapture) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Framework, b.Framework))
	})
	return fc
}

func (fc *frameworkCapture) add(events []trace.Event, capture trace.FrameworkCapture) {
	fc.events = append(fc.events, events...)
	fc.captures = append(fc.captures, capture)
}

// sortByPID keeps the paths whose name holds a pid (torch-<pid>.pickle), by pid.
func sortByPID(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, ok := filePID(p); ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		pa, _ := filePID(a)
		pb, _ := filePID(b)
		return cmp.Compare(pa, pb)
	})
	return out
}

// filePID reads the pid in a name like torch-<pid>.pickle.
func filePID(path string) (uint32, bool) {
	name := filepath.Base(path)
	_, rest, _ := strings.Cut(name, "-")
	digits, _, _ := strings.Cut(rest, ".")
	pid, err := strconv.ParseUint(digits, 10, 32)
	return uint32(pid), err == nil && pid > 0
}

// clockOffset is pid's wall-minus-monotonic difference, or any process's when pid has no raw log
// (the difference is the host's, up to clock adjustments), or 0 when there are no raw logs.
func clockOffset(offsets map[uint32]int64, pid uint32) int64 {
	if off, ok := offsets[pid]; ok {
		return off
	}
	keys := slices.Sorted(maps.Keys(offsets))
	if len(keys) == 0 {
		return 0
	}
	return offsets[keys[0]]
}

// readTorchSnapshot reads a snapshot the hook wrote and keeps its framework-layer events (block
// allocations and frees, out-of-memory errors); its segment entries are left out, since the shim
// recorded the CUDA calls themselves. Stacks are left out too (the trace's callsites are return
// addresses). The segments at the first out-of-memory error, rebuilt from the whole history, go
// into the capture (FrameworkCapture.OOM) when the history is complete; oomNote says why they do
// not when it is not.
func readTorchSnapshot(path string, pid uint32, offset int64) (events []trace.Event, capture trace.FrameworkCapture,
	oomNote string, err error) {
	capture = trace.FrameworkCapture{PID: pid, Framework: trace.FrameworkTorch}
	r, err := trace.Open(path)
	if err != nil {
		return nil, capture, "", err
	}
	defer r.Close()
	oom := torchhist.NewOOMFinder()
	for {
		batch, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, capture, "", err
		}
		for _, e := range batch {
			oom.Add(&e)
			if e.Layer != trace.LayerFramework {
				continue
			}
			e.PID, e.TID, e.Callsite, e.TimeNs = pid, 0, 0, e.TimeNs-offset
			events = append(events, e)
		}
	}
	capture.Events = int64(len(events))
	capture.MaxEntries = torchMaxEntries(strings.TrimSuffix(path, ".pickle") + ".json")
	for _, n := range torchsnap.Of(r).TraceEntries {
		capture.Entries += int64(n)
		if capture.MaxEntries > 0 && int64(n) >= capture.MaxEntries {
			capture.Full = true
		}
	}
	state, oomNote := torchOOM(oom, r, capture.Full)
	capture.OOM = state.JSON()
	return events, capture, oomNote, nil
}

// torchOOM is the state at the first out-of-memory error of a PyTorch history that f followed,
// the blocks' stacks named through r; nil without an error. When the history lost entries (full)
// or names segments or blocks the rebuild does not hold, the state is not kept and note says why.
func torchOOM(f *torchhist.OOMFinder, r *trace.Reader, full bool) (state *torchsnap.OOM, note string) {
	const lost = "its out-of-memory error cannot be explained at the failing request: "
	switch {
	case f.OOM == nil:
		return nil, ""
	case full:
		return nil, lost + "the history lost its oldest entries"
	case f.Unplaced > 0:
		return nil, fmt.Sprintf(lost+"%d history entries name segments or blocks the history never made", f.Unplaced)
	}
	state = &torchsnap.OOM{Device: f.OOM.Device, RequestedBytes: f.OOM.Size, DeviceFreeBytes: f.OOM.Address,
		Segments: f.Segments}
	index := map[uint64]uint64{} // the reader's callsite → its index in state.Callsites, from 1
	for i := range state.Segments {
		for j := range state.Segments[i].BlockList {
			b := &state.Segments[i].BlockList[j]
			if b.Callsite == 0 {
				continue
			}
			if _, ok := index[b.Callsite]; !ok {
				site, _ := r.Callsite(0, b.Callsite)
				state.Callsites = append(state.Callsites, site.Label)
				index[b.Callsite] = uint64(len(state.Callsites))
			}
			b.Callsite = index[b.Callsite]
		}
	}
	return state, ""
}

// torchMaxEntries reads the history bound the hook noted beside the snapshot; 0 when unknown.
func torchMaxEntries(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var side struct {
		MaxEntries int64 `json:"max_entries"`
	}
	if json.Unmarshal(b, &side) != nil || side.MaxEntries < 0 {
		return 0
	}
	return side.MaxEntries
}

// cupyLine is one line of a CuPy log (docs/compatibility.md).
type cupyLine struct {
	TimeNs  *int64 `json:"t"`
	Op      string `json:"op"`
	Device  int32  `json:"dev"`
	Size    uint64 `json:"size"`
	MemSize uint64 `json:"mem_size"`
	Ptr     uint64 `json:"ptr"`
	TID     uint32 `json:"tid"`
}

// readCupyLog reads a CuPy log: each malloc line becomes a cupy.malloc of the requested size, each
// free line a cupy.free of the block's size. Unreadable lines are counted as dropped.
func readCupyLog(path string, pid uint32) ([]trace.Event, trace.FrameworkCapture, error) {
	capture := trace.FrameworkCapture{PID: pid, Framework: trace.FrameworkCupy}
	f, err := os.Open(path)
	if err != nil {
		return nil, capture, err
	}
	defer f.Close()
	var events []trace.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		capture.Entries++
		e, ok := cupyEvent(sc.Bytes(), pid)
		if !ok {
			capture.Dropped++
			continue
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, capture, err
	}
	capture.Events = int64(len(events))
	return events, capture, nil
}

// cupyEvent converts one CuPy log line.
func cupyEvent(line []byte, pid uint32) (trace.Event, bool) {
	var l cupyLine
	if json.Unmarshal(line, &l) != nil || l.TimeNs == nil {
		return trace.Event{}, false
	}
	e := trace.Event{TimeNs: *l.TimeNs, PID: pid, TID: l.TID, Device: l.Device, Layer: trace.LayerFramework, Address: l.Ptr}
	switch l.Op {
	case "malloc":
		e.Op, e.Function, e.Size = trace.OpAlloc, trace.FuncCupyMalloc, l.Size
	case "free":
		e.Op, e.Function, e.Size = trace.OpFree, trace.FuncCupyFree, l.MemSize
	default:
		return trace.Event{}, false
	}
	return e, true
}
