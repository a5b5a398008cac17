package analysis

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// frameworkSections is what the framework rules change in a report: the text's FRAMEWORK,
// ANOMALIES and RECOMMENDATION sections, and the JSON's framework, anomalies and pool.json
// equivalents.
func frameworkSections(t *testing.T, r *Report) (text, js []byte) {
	t.Helper()
	var out bytes.Buffer
	full := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	for _, block := range strings.Split(full, "\n\n") {
		for _, title := range []string{"FRAMEWORK", "ANOMALIES", "RECOMMENDATION"} {
			if strings.HasPrefix(block, title) {
				out.WriteString(strings.TrimSuffix(block, "\n") + "\n\n")
			}
		}
	}
	tr := r.Combined
	parts := map[string]any{"framework": tr.Framework, "anomalies": tr.Anomalies, "equivalents": tr.Config.Equivalents}
	js, err := json.MarshalIndent(parts, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), append(js, '\n')
}

// TestGoldenFrameworkTraces checks the framework rules on the bundled H200 recordings: PyTorch
// with its caching allocator, with and without expandable segments (its segments held, not
// leaked), CuPy recorded with
// set_allocator(None) and JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform (no pool of theirs in the
// trace: nothing held, no note); and on hand-made traces shaped as the H200 runs with their pools
// on: CuPy's default pool (61 blocks held until exit) and JAX's default preallocation (one
// cuMemAlloc of 75 % of the H200).
func TestGoldenFrameworkTraces(t *testing.T) {
	inputs := map[string]Input{
		"cupy-pool":    describedInput(cupyPool(), []string{"python3", "cupy_work.py", "100"}, "NVIDIA H200", nil),
		"jax-prealloc": describedInput(jaxPrealloc(), []string{"python3", "jax_work.py", "20"}, "NVIDIA H200", nil),
	}
	for _, name := range []string{"d_torch_caching_train", "d_torch_expandable_train", "i_torch_caching_cnn", "e_cupy", "f_jax"} {
		path := "../../testdata/h200/" + name + ".arrow"
		inputs["h200-"+name] = Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }}
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			r, err := Analyze([]Input{in}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			text, js := frameworkSections(t, r)
			golden(t, "framework-"+name+".txt", text)
			golden(t, "framework-"+name+".json", js)
		})
	}
}

// cupyPool is shaped as cupy_work.py 100 with CuPy's default pool: 61 cudaMalloc blocks of sizes
// rounded to 512 B, held until exit, and the program's requests served from them (not in a trace
// of driver calls).
func cupyPool() []trace.Event {
	b := &builder{}
	for i := range 61 {
		size := uint64(512 * (1 + i*37%4096))
		b.add(trace.Event{Op: trace.OpAlloc, Address: 0x7f0000000000 + uint64(i)<<24, Size: size, Callsite: 0x7f8a36c7de6e})
	}
	return b.events
}

// jaxPrealloc is shaped as jax_work.py with JAX's defaults: CUDA's own two small allocations, then
// one cuMemAlloc of 75 % of the H200's memory (XLA's arena), held until exit.
func jaxPrealloc() []trace.Event {
	b := &builder{}
	b.add(trace.Event{Op: trace.OpAlloc, Function: "cuMemAlloc_v2", Address: 0x7fa353800000, Size: 25344, Callsite: 0x7fa614aa05fe})
	b.add(trace.Event{Op: trace.OpAlloc, Function: "cuMemAlloc_v2", Address: 0x7fa353806400, Size: 4, Callsite: 0x7fa614aa05fe})
	b.add(trace.Event{Op: trace.OpAlloc, Function: "cuMemAlloc_v2", Address: 0x7f9000000000, Size: 150_109_880_320 * 3 / 4,
		Callsite: 0x7fa40692a619})
	return b.events
}

// The memory held by PyTorch's allocator in the H200 recordings is what PyTorch itself reported
// for the same runs (testdata/h200/README.md: torch.cuda.max_memory_reserved() and its segment
// count, in testdata/torch/*.stats.json; with expandable segments the count is of its pages).
func TestHeldIsPyTorchReserved(t *testing.T) {
	for _, c := range []struct {
		trace, stats string
		segments     uint64
	}{
		{"d_torch_caching_train", "train.caching", 8},
		{"d_torch_expandable_train", "train.expandable", 9},
		{"i_torch_caching_cnn", "cnn.caching", 28},
	} {
		raw, err := os.ReadFile("../../testdata/torch/" + c.stats + ".stats.json")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Reserved uint64 `json:"max_memory_reserved"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		path := "../../testdata/h200/" + c.trace + ".arrow"
		tr := analyzeOne(t, Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }})
		h := tr.Anomalies.HeldByAllocator
		if h == nil || h.Framework != "PyTorch" || h.Bytes != st.Reserved || h.Count != c.segments {
			t.Errorf("%s: held %+v, want %d segments, %d bytes (PyTorch's max_memory_reserved)", c.trace, h,
				c.segments, st.Reserved)
		}
	}
}
