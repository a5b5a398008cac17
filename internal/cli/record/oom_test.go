package record

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/internal/torchsnap"
	"github.com/allocscope/allocscope/trace"
)

// oomReport is the JSON of the OOM report the test compares, as analyze --json writes it.
type oomReport struct {
	Combined struct {
		OOM json.RawMessage `json:"oom"`
	} `json:"combined"`
}

// recordAndAnalyzeOOM records torch_train.py MODE with the stand-in torch and the fake driver,
// and analyzes the trace: its text and JSON reports, and the parent's capture.
func recordAndAnalyzeOOM(t *testing.T, mode string) (text, js string, captures []trace.FrameworkCapture) {
	t.Helper()
	env := testcuda.Build(t)
	python := pythonForTests(t)
	out := tempPath(t, "out.arrow")
	code, _, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", python, pythonScript(t, "torch_train.py"), mode)
	if code != 5 {
		t.Fatalf("record: exit code %d, want 5 (stderr %q)", code, stderr)
	}
	_, info := testcuda.ReadTrace(t, out)
	in := analysis.Input{Name: "out.arrow", Open: func() (analysis.Source, error) { return trace.Open(out) }}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tb, jb bytes.Buffer
	if err := analysis.WriteText(&tb, r); err != nil {
		t.Fatal(err)
	}
	if err := analysis.WriteJSON(&jb, r); err != nil {
		t.Fatal(err)
	}
	return tb.String(), jb.String(), info.Framework
}

// parentOOMText is the report on the parent's out-of-memory error for the request size and the
// setting line: the 2 MiB segment holds the live 4 KiB block of torch_train.py's line 42 between
// 1 KiB and 2,092,032 bytes free.
func parentOOMText(asked, setting string) string {
	return "OUT OF MEMORY (seq 7, device 0, from the recorded history at the failing request)\n" +
		"  asked for " + asked + " with 1 MiB free on the device; PyTorch could have held 3 MiB\n" +
		"  reserved 2 MiB: 4 KiB allocated, 2 MiB cached but free\n" +
		"  largest free block on stream 0x0: 2 MiB\n" +
		"  segment 0x7f0000000000 (2 MiB): 2 MiB free, largest 2 MiB, pinned by 1 block(s) in use:\n" +
		"         4 KiB  from main (torch_train.py:42)\n" +
		"  " + setting + "\n\n"
}

// parentOOMJSON is the JSON report of the same error; fits is its "fits" member, or "".
func parentOOMJSON(asked uint64, fits string) string {
	s := `{"seq": 7, "device": 0, "requested_bytes": ` + strconv.FormatUint(asked, 10) + `,
		"device_free_bytes": 1048576, "capacity_bytes": 3145728, "reserved_bytes": 2097152,
		"allocated_bytes": 4096, "cached_free_bytes": 2093056, "largest_free": [{"stream": 0, "bytes": 2092032}],
		"fragmented": [{"address": "0x7f0000000000", "stream": 0, "size_bytes": 2097152, "free_bytes": 2093056,
			"largest_free_bytes": 2092032, "pinned_by": [{"size_bytes": 4096, "callsite": "main (torch_train.py:42)"}],
			"pinned_blocks": 1}],`
	if fits != "" {
		s += `"fits": ` + fits + `,`
	}
	return s + `"recorded": true}`
}

// parentState is the parent's segment at the error as record keeps it in the trace.
func parentState(asked uint64) *torchsnap.OOM {
	const base = 0x7f0000000000
	return &torchsnap.OOM{Device: 0, RequestedBytes: asked, DeviceFreeBytes: 1 << 20,
		Segments: []torchsnap.Segment{{Address: base, TotalSize: 2 << 20, AllocatedSize: 4096, ActiveSize: 4096,
			RequestedSize: 4096, Blocks: 3, BlockList: []torchsnap.Block{
				{Address: base, Size: 1024, State: "inactive"},
				{Address: base + 1024, Size: 4096, RequestedSize: 4096, State: "active_allocated", Callsite: 1},
				{Address: base + 5120, Size: 2<<20 - 5120, State: "inactive"}}}},
		Callsites: []string{"main (torch_train.py:42)"}}
}

// decodeOOM decodes a capture's state (trace.FrameworkCapture.OOM); nil when it holds none.
func decodeOOM(t *testing.T, raw json.RawMessage) *torchsnap.OOM {
	t.Helper()
	o, err := torchsnap.DecodeOOM(raw)
	if err != nil {
		t.Fatalf("state %s: %v", raw, err)
	}
	return o
}

// record -- python3 torch_train.py oom|oom-small, then analyze: the trace keeps the parent's
// segments at its out-of-memory error, rebuilt from its history (a 1000-byte block freed beside a
// live 4 KiB one in a 2 MiB segment; the child has no error), and analyze explains the error from
// them as it explains a snapshot's, in text and JSON: reserved, allocated, cached but free, the
// device's free bytes from the error, the largest free block, the pinned segment with its pinning
// block's stack, and the setting that fits: none for 1 TiB, the defaults (peak reserved 2 MiB in
// the model, within 3 MiB less the request) for 1 MiB.
func TestRecordedOOMExplained(t *testing.T) {
	defaults := `{"conf": "", "settings": 0, "peak_reserved_bytes": 2097152, "segments": 1, "releases": 0,
		"failures": 0, "saved_bytes": 0}`
	for _, c := range []struct {
		mode, asked, setting, fits string
		bytes                      uint64
	}{
		{"oom", "1 TiB", "no setting of the search fits in 3 MiB", "", 1 << 40},
		{"oom-small", "1 MiB", "would have fit: PYTORCH_CUDA_ALLOC_CONF=(defaults) (peak reserved 2 MiB in the model)",
			defaults, 1 << 20},
	} {
		t.Run(c.mode, func(t *testing.T) {
			text, js, captures := recordAndAnalyzeOOM(t, c.mode)
			if len(captures) != 2 || !reflect.DeepEqual(decodeOOM(t, captures[0].OOM), parentState(c.bytes)) || captures[1].OOM != nil {
				b, _ := json.Marshal(captures)
				t.Errorf("captures %s; want the parent's state %+v and none for the child", b, parentState(c.bytes))
			}
			if want := parentOOMText(c.asked, c.setting); !strings.Contains(text, "\n"+want) {
				t.Errorf("the text report lacks\n%s\nin\n%s", want, text)
			}
			var rep oomReport
			var got, want any
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(rep.Combined.OOM, &got); err != nil {
				t.Fatalf("oom %s: %v", rep.Combined.OOM, err)
			}
			if m, ok := got.(map[string]any); ok { // the parent's pid, which changes from run to run
				if pid, _ := m["pid"].(float64); len(captures) == 0 || uint32(pid) != captures[0].PID {
					t.Errorf("oom of pid %v, want the parent's", m["pid"])
				}
				delete(m, "pid")
			}
			if err := json.Unmarshal([]byte(parentOOMJSON(c.bytes, c.fits)), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("oom JSON %s\nwant %s", rep.Combined.OOM, parentOOMJSON(c.bytes, c.fits))
			}
		})
	}
}

// With ALLOCSCOPE_TORCH_MAX_ENTRIES=3 the parent's history lost its segment_alloc: record warns
// once that its out-of-memory error cannot be explained and keeps no state, and analyze then
// explains none.
func TestRecordedOOMOfAFullHistory(t *testing.T) {
	env := testcuda.Build(t)
	python := pythonForTests(t)
	t.Setenv("ALLOCSCOPE_TORCH_MAX_ENTRIES", "3")
	out := tempPath(t, "out.arrow")
	code, _, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", python, pythonScript(t, "torch_train.py"), "oom")
	if code != 5 {
		t.Fatalf("record: exit code %d (stderr %q)", code, stderr)
	}
	const warning = ": its out-of-memory error cannot be explained at the failing request: the history lost its oldest entries\n"
	if n := strings.Count(stderr, warning); n != 1 {
		t.Errorf("%d warnings %q in stderr %q, want 1", n, warning, stderr)
	}
	_, info := testcuda.ReadTrace(t, out)
	for _, c := range info.Framework {
		if c.OOM != nil {
			t.Errorf("pid %d: state %s kept", c.PID, c.OOM)
		}
	}
	in := analysis.Input{Name: "out.arrow", Open: func() (analysis.Source, error) { return trace.Open(out) }}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Combined.OOM != nil {
		t.Errorf("oom %+v, want none", r.Combined.OOM)
	}
}
