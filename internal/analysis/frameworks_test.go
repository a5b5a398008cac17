package analysis

import (
	"bytes"
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

// describedSource is a fakeSource with a recording's metadata and callsite names.
type describedSource struct {
	fakeSource
	info  trace.Info
	names map[uint64]string
}

func (s *describedSource) Info() trace.Info { return s.info }

func (s *describedSource) Callsite(_ uint32, id uint64) (trace.Callsite, bool) {
	label, ok := s.names[id]
	return trace.Callsite{Label: label}, ok
}

// describedInput is an input of events recorded by command on gpu, callsites named by names.
func describedInput(events []trace.Event, command []string, gpu string, names map[uint64]string) Input {
	return Input{Name: "described", Open: func() (Source, error) {
		info := trace.Info{Source: trace.SourceAllocscope, Command: command}
		if gpu != "" {
			info.GPUNames = []string{gpu}
		}
		return &describedSource{fakeSource: fakeSource{events: events, batch: 4}, info: info, names: names}, nil
	}}
}

const (
	mib2  = 2 << 20
	mib20 = 20 << 20
	// segmentSite is the callsite of the hand-made traces' framework allocations, appSite the
	// program's own.
	segmentSite = 0x7000
	appSite     = 0x9000
)

// segments is a trace whose site segmentSite makes cudaMalloc calls of sizes, never freed, and
// whose program allocates and frees a 100-byte buffer and leaks one of 4 KiB at appSite; freed
// makes segmentSite free its last block.
func segments(function string, sizes []uint64, freed bool) []trace.Event {
	b := &builder{}
	for i, size := range sizes {
		b.add(trace.Event{Op: trace.OpAlloc, Function: function, Address: 0x10000000 + uint64(i)<<28, Size: size,
			Callsite: segmentSite})
	}
	b.add(trace.Event{Op: trace.OpAlloc, Address: 0x1000, Size: 100, Callsite: appSite})
	b.add(trace.Event{Op: trace.OpFree, Address: 0x1000, Callsite: appSite})
	b.add(trace.Event{Op: trace.OpAlloc, Address: 0x2000, Size: 4096, Callsite: appSite})
	if freed {
		b.add(trace.Event{Op: trace.OpFree, Address: 0x10000000 + uint64(len(sizes)-1)<<28, Callsite: segmentSite})
	}
	return b.events
}

func analyzeOne(t *testing.T, in Input) *schema.TraceReport {
	t.Helper()
	r, err := Analyze([]Input{in}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Combined
}

// checkHeld checks the held segments and the leaks left: the program's one 4 KiB block.
func checkHeld(t *testing.T, tr *schema.TraceReport, fw string, count, bytes uint64) {
	t.Helper()
	h := tr.Anomalies.HeldByAllocator
	if h == nil || h.Framework != fw || h.Count != count || h.Bytes != bytes || len(h.Callsites) != 1 ||
		h.Callsites[0] != "0x7000" || uint64(len(h.Events)) != min(count, 5) || h.Events[0].Seq != 1 {
		t.Fatalf("held = %+v, want %s %d segments %d bytes from 0x7000", h, fw, count, bytes)
	}
	l := tr.Anomalies.Leaks
	if l.Count != 1 || l.Bytes != 4096 || len(l.Events) != 1 || l.Events[0].Callsite != "0x9000" {
		t.Errorf("leaks = %+v, want the program's 4 KiB block only", l)
	}
}

func TestFrameworkPyTorchByCommand(t *testing.T) {
	sizes := []uint64{mib2, 32 << 20, mib2, 84 << 20}
	tr := analyzeOne(t, describedInput(segments("cudaMalloc", sizes, false), []string{"python3", "train_torch.py"}, "", nil))
	checkHeld(t, tr, "PyTorch", 4, 2*mib2+116<<20)
	want := []string{"the command line names torch (train_torch.py)",
		"cudaMalloc at 0x7000: 4, all multiples of 2 MiB (2 of 2 MiB, 0 of 20 MiB), none freed"}
	if f := tr.Framework; f == nil || f.Layer != "driver" || strings.Join(f.Evidence, "|") != strings.Join(want, "|") ||
		!strings.Contains(f.SeeRequests, "--no-framework") || !strings.Contains(f.SeeRequests, "PYTORCH_NO_CUDA_MEMORY_CACHING=1") {
		t.Errorf("framework = %+v", tr.Framework)
	}
	if got := tr.Config.Equivalents.PyTorchAllocConf; got != "" {
		t.Errorf("pool.json's PYTORCH_CUDA_ALLOC_CONF = %q from segments, want none", got)
	}
	if _, err := PyTorchConf(&Report{Combined: tr}); err == nil ||
		!strings.HasPrefix(err.Error(), "the trace holds PyTorch's segments, not its requests") {
		t.Errorf("PyTorchConf error = %v", err)
	}
}

func TestFrameworkPyTorchBySizesAlone(t *testing.T) {
	tr := analyzeOne(t, fakeInput("plain", segments("cudaMalloc", []uint64{mib20, mib2, 40 << 20}, false)))
	checkHeld(t, tr, "PyTorch", 3, 62<<20)
	if e := tr.Framework.Evidence; len(e) != 1 || e[0] != "cudaMalloc at 0x7000: 3, all multiples of 2 MiB (1 of 2 MiB, 1 of 20 MiB), none freed" {
		t.Errorf("evidence = %q", e)
	}
}

func TestFrameworkPyTorchByName(t *testing.T) {
	// Odd sizes and a free: the name alone tells.
	names := map[uint64]string{segmentSite: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block"}
	tr := analyzeOne(t, describedInput(segments("cudaMalloc", []uint64{3 << 20, 5000, mib2}, true), []string{"python3", "app.py"}, "", names))
	h := tr.Anomalies.HeldByAllocator
	if h == nil || h.Framework != "PyTorch" || h.Count != 2 || h.Bytes != 3<<20+5000 || h.Callsites[0] != names[segmentSite] {
		t.Fatalf("held = %+v", h)
	}
	if e := tr.Framework.Evidence; len(e) != 1 || e[0] != "callsite "+names[segmentSite]+" is PyTorch's allocator" {
		t.Errorf("evidence = %q", e)
	}
}

func TestFrameworkNotDetected(t *testing.T) {
	for _, c := range []struct {
		name    string
		events  []trace.Event
		command []string
	}{
		// Multiples of 2 MiB with only 2 MiB ones and no command naming torch: a program's own.
		{"2 MiB buffers", segments("cudaMalloc", []uint64{mib2, 4 << 20}, false), []string{"./solver"}},
		// PyTorch without caching: its site frees.
		{"torch without caching", segments("cudaMalloc", []uint64{mib2, mib20}, true), []string{"python3", "torch_work.py"}},
		// Sizes not rounded to 2 MiB.
		{"torch, odd sizes", segments("cudaMalloc", []uint64{mib2, mib20 + 512}, false), []string{"python3", "torch_work.py"}},
		// CuPy with set_allocator(None): frees.
		{"cupy without its pool", segments("cudaMalloc", []uint64{512, 1024}, true), []string{"python3", "cupy_work.py"}},
		// A large allocation without JAX's evidence.
		{"one large cuMemAlloc", segments("cuMemAlloc_v2", []uint64{4 << 30}, false), []string{"./app"}},
	} {
		tr := analyzeOne(t, describedInput(c.events, c.command, "", nil))
		if tr.Framework != nil || tr.Anomalies.HeldByAllocator != nil {
			t.Errorf("%s: framework %+v, held %+v; want none", c.name, tr.Framework, tr.Anomalies.HeldByAllocator)
		}
	}
}

func TestFrameworkCuPyPool(t *testing.T) {
	sizes := []uint64{512, 8 << 20, 1536, 8 << 20}
	tr := analyzeOne(t, describedInput(segments("cudaMalloc", sizes, false), []string{"python3", "cupy_work.py", "100"}, "", nil))
	checkHeld(t, tr, "CuPy", 4, 512+1536+16<<20)
	if e := tr.Framework.Evidence; len(e) != 2 || e[1] != "cudaMalloc at 0x7000: 4, all multiples of 512 B, none freed" ||
		!strings.Contains(tr.Framework.SeeRequests, "cupy.cuda.set_allocator(None)") {
		t.Errorf("framework = %+v", tr.Framework)
	}
}

func TestFrameworkJAXArena(t *testing.T) {
	const total = 150_109_880_320 // the H200's
	arena := uint64(total * 3 / 4)
	for _, c := range []struct {
		name     string
		command  []string
		gpu      string
		fraction float64
		reason   string
	}{
		{"by the share of the GPU", []string{"./app"}, "NVIDIA H200", 0.75, "one cuMemAlloc_v2 of 75.0% of the NVIDIA H200's memory, the largest allocation"},
		{"by the command", []string{"python3", "jax_work.py"}, "", 0, "one cuMemAlloc_v2 of 104.9 GiB, the largest allocation"},
	} {
		tr := analyzeOne(t, describedInput(segments("cuMemAlloc_v2", []uint64{arena}, false), c.command, c.gpu, nil))
		f := tr.Framework
		if f == nil || f.Framework != "JAX" || f.ArenaBytes != arena || f.ArenaFraction != c.fraction ||
			f.Evidence[len(f.Evidence)-1] != c.reason || !strings.Contains(f.SeeRequests, "XLA_PYTHON_CLIENT_ALLOCATOR=platform") {
			t.Errorf("%s: framework = %+v", c.name, f)
			continue
		}
		checkHeld(t, tr, "JAX", 1, arena)
	}
	// Half the GPU, no other evidence: not JAX's default preallocation.
	tr := analyzeOne(t, describedInput(segments("cuMemAlloc_v2", []uint64{total / 2}, false), []string{"./app"}, "NVIDIA H200", nil))
	if tr.Framework != nil {
		t.Errorf("half the GPU: framework = %+v", tr.Framework)
	}
}

func TestFrameworkTextAndJSON(t *testing.T) {
	tr := analyzeOne(t, describedInput(segments("cudaMalloc", []uint64{mib2, mib20}, false), []string{"python3", "torch_work.py"}, "", nil))
	r := &Report{Version: 1, Inputs: []string{"described"}, Warnings: []string{}, Combined: tr}
	text := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	for _, line := range []string{
		"FRAMEWORK: PyTorch's own allocator; the trace has its segments, not the program's requests",
		"  evidence: the command line names torch (torch_work.py)",
		"  held by PyTorch's allocator until exit: 2 segments, 22 MiB (not leaks)",
		"  leaks (never freed)                 1  4 KiB",
		"  PYTORCH_CUDA_ALLOC_CONF=(needs PyTorch's requests)",
		"  not a pool for the program's requests: this one is sized to PyTorch's segments (what record",
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("text lacks %q", line)
		}
	}
	var js struct {
		Combined struct {
			Anomalies struct {
				Held schema.Held `json:"held_by_allocator"`
			} `json:"anomalies"`
			Framework schema.FrameworkNote `json:"framework"`
		} `json:"combined"`
	}
	if err := json.Unmarshal(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) }), &js); err != nil {
		t.Fatal(err)
	}
	if h := js.Combined.Anomalies.Held; h.Framework != "PyTorch" || h.Count != 2 || h.Bytes != 22<<20 {
		t.Errorf("JSON held_by_allocator = %+v", h)
	}
	if f := js.Combined.Framework; f.Framework != "PyTorch" || f.Layer != "driver" {
		t.Errorf("JSON framework = %+v", f)
	}
}

// cupyRequests is a trace of CuPy's own requests (the framework layer): 3 steps of a 1 MiB and a
// 3 MiB block, from one 8 MiB cudaMalloc of its pool.
func cupyRequests() []trace.Event {
	b := &builder{}
	b.add(trace.Event{Op: trace.OpAlloc, Function: "cudaMalloc", Address: 0x10000000, Size: 8 << 20})
	fw := func(op trace.Op, addr, size uint64) {
		fn := map[trace.Op]string{trace.OpAlloc: "cupy.malloc", trace.OpFree: "cupy.free"}[op]
		b.add(trace.Event{Op: op, Layer: trace.LayerFramework, Function: fn, Address: addr, Size: size})
	}
	for range 3 {
		fw(trace.OpAlloc, 0x10000000, 1<<20)
		fw(trace.OpAlloc, 0x10100000, 3<<20)
		fw(trace.OpFree, 0x10000000, 0)
		fw(trace.OpFree, 0x10100000, 0)
	}
	return b.events
}

func TestFrameworkCuPySetting(t *testing.T) {
	tr := analyzeOne(t, fakeInput("cupy", cupyRequests()))
	f := tr.Framework
	if f == nil || f.Framework != "CuPy" || f.Layer != "framework" || f.PeakReservedBytes != 4<<20 ||
		f.Setting != "cupy.get_default_memory_pool().set_limit(size=4194304)" {
		t.Fatalf("framework = %+v", f)
	}
	text := string(output(t, &Report{Combined: tr}, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	if !strings.Contains(text, "RECOMMENDATION (pool.json, policy sizeclass)\n"+
		"  first, CuPy's own setting: cupy.get_default_memory_pool().set_limit(size=4194304)\n"+
		"    predicted peak reserved 4 MiB (a best-fit pool's, rounded up to 1 MiB)\n"+
		"  then the pool of allocscope's own (pool.json):\n") {
		t.Errorf("recommendation:\n%s", text[strings.Index(text, "RECOMMENDATION"):])
	}
}

// The HTML page's summary names what the framework's allocator holds and how to see its requests.
func TestFrameworkHTMLSummary(t *testing.T) {
	tr := analyzeOne(t, describedInput(segments("cudaMalloc", []uint64{mib2, mib20}, false), []string{"python3", "torch_work.py"}, "", nil))
	r := &Report{Version: 1, Inputs: []string{"described"}, Warnings: []string{}, Combined: tr}
	page := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) }))
	page = html.UnescapeString(regexp.MustCompile(`<b class="fig"[^>]*>([^<]*)</b>`).ReplaceAllString(page, "$1")) // the figures' text
	for _, s := range []string{
		"held by PyTorch's allocator until exit: 2 segments, 22 MiB (not leaks); leaks 1, 4 KiB",
		"to see PyTorch's requests: record captures PyTorch's own requests unless it ran with --no-framework",
	} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// On a PyTorch snapshot (the H200 MLP training run) the recommendation leads with the search's
// best PYTORCH_CUDA_ALLOC_CONF, its predicted peak reserved and the saving against the defaults
// (PyTorch's real max_memory_reserved: 112 MiB with the defaults, 108 MiB with expandable segments).
func TestFrameworkPyTorchSettingFirst(t *testing.T) {
	path := "../../testdata/torch/train.caching.snapshot.pickle.gz"
	tr := analyzeOne(t, Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }})
	f := tr.Framework
	if f == nil || f.Layer != "framework" || f.Setting != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" ||
		f.PeakReservedBytes != 108<<20 || f.DefaultsPeakReservedBytes != 112<<20 || f.SavedBytes != 4<<20 {
		t.Fatalf("framework = %+v", f)
	}
	text := string(output(t, &Report{Combined: tr}, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	want := "RECOMMENDATION (pool.json, policy sizeclass)\n" +
		"  first, PyTorch's own setting: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" +
		"    predicted peak reserved 108 MiB; the defaults' 112 MiB: 4 MiB saved\n" +
		"  then the pool of allocscope's own (pool.json):\n"
	if !strings.Contains(text, want) {
		t.Errorf("recommendation:\n%s", text[strings.Index(text, "RECOMMENDATION"):])
	}
}

// A trace of JAX's own requests on a known GPU: XLA_PYTHON_CLIENT_MEM_FRACTION from the best-fit
// pool's peak (4 MiB of the H200's 150,109,880,320 bytes, rounded up to 0.01).
func TestFrameworkJAXSetting(t *testing.T) {
	events := cupyRequests()
	for i := range events {
		events[i].Function = strings.Replace(strings.Replace(events[i].Function, "cupy.malloc", "jax.alloc", 1), "cupy.free", "jax.free", 1)
	}
	tr := analyzeOne(t, describedInput(events, []string{"python3", "app.py"}, "NVIDIA H200", nil))
	if f := tr.Framework; f == nil || f.Framework != "JAX" || f.Layer != "framework" ||
		f.Setting != "XLA_PYTHON_CLIENT_MEM_FRACTION=0.01" || f.PeakReservedBytes != 4<<20 {
		t.Errorf("framework = %+v", f)
	}
}
