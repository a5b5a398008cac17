package analysis

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

// fileInput is an input of a file under the repository's testdata.
func fileInput(path string) Input {
	path = filepath.Join("..", "..", "testdata", path)
	return Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }}
}

// answerJSON is an answer as JSON, the form the test compares.
func answerJSON(t *testing.T, a *schema.Answer) string {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The answer of the bundled trace (PyTorch with its caching off: every request a cudaMalloc):
// today raw cudaMalloc holding peak live, the pool costs 4.5 MiB more and saves 99.8 % of the
// 34.5 ms inside allocation calls; its leaks need action; PYTORCH_CUDA_ALLOC_CONF applies (the
// command runs torch).
func TestAnswerOfTheBundledTrace(t *testing.T) {
	a := analyzeOne(t, fileInput("../internal/cli/analyze/bundled/pytorch-train.arrow")).Answer
	if a == nil {
		t.Fatal("no answer")
	}
	s := a.Savings
	if a.PeakLiveBytes != 234868940 || a.WallNs != 4693623897 || !a.CallTimeKnown || a.CallNs != 34496025 ||
		a.Today != (schema.Today{Allocator: schema.AllocatorRaw, PeakReservedBytes: 234868940, ReservedFrom: "trace"}) ||
		a.Recommendation.Kind != schema.AdvicePool || a.Recommendation.PeakReservedBytes != 239627264 ||
		!s.MemoryKnown || s.MemoryBytes != 234868940-239627264 || !s.TimeKnown || s.TimeNs != 34429646 {
		t.Errorf("answer %s", answerJSON(t, a))
	}
	want := "serve the requests from allocscope's pool (analyze --emit-config pool.json, then record --pool): " +
		"peak reserved 228.5 MiB"
	if a.Recommendation.Summary != want {
		t.Errorf("summary %q, want %q", a.Recommendation.Summary, want)
	}
	if len(a.Actions) != 1 || a.Actions[0].Kind != schema.ActionLeak || a.Actions[0].Count != 9 ||
		a.Actions[0].Bytes != 202639360 || a.Actions[0].Seq != 10 {
		t.Errorf("actions %+v", a.Actions)
	}
	if len(a.Equivalents) != 1 || a.Equivalents[0] != schema.EquivalentPyTorch {
		t.Errorf("equivalents %q", a.Equivalents)
	}
}

// A PyTorch snapshot has no call durations: the time is unknown, today is PyTorch's caching
// allocator with its defaults (the model's peak reserved), and the best setting of the search
// halves it.
func TestAnswerOfASnapshot(t *testing.T) {
	a := analyzeOne(t, fileInput("torch/cnn.caching.snapshot.pickle.gz")).Answer
	s := a.Savings
	if a.CallTimeKnown || a.CallNs != 0 || s.TimeKnown ||
		a.Today != (schema.Today{Allocator: schema.AllocatorPyTorch, PeakReservedBytes: 3972005888, ReservedFrom: "model"}) ||
		a.Recommendation.Kind != schema.AdviceSetting ||
		a.Recommendation.Setting != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" ||
		a.Recommendation.PeakReservedBytes != 1954545664 || !s.MemoryKnown || s.MemoryBytes != 3972005888-1954545664 {
		t.Errorf("answer %s", answerJSON(t, a))
	}
}

// Within a capacity no setting fits, the recommendation says so, with the closest setting.
func TestAnswerWhenNothingFits(t *testing.T) {
	r, err := Analyze([]Input{fileInput("torch/cnn.caching.snapshot.pickle.gz")}, Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Combined.Answer
	rec := a.Recommendation
	if rec.Kind != schema.AdviceNoneFits || rec.CapacityBytes != 1<<30 || rec.MissBytes != 1954545664-1<<30 ||
		rec.PeakReservedBytes != 1954545664 || a.Savings.MemoryKnown {
		t.Errorf("answer %s", answerJSON(t, a))
	}
	want := "nothing fits in 1 GiB: the closest PYTORCH_CUDA_ALLOC_CONF setting, expandable_segments:True, " +
		"needs 1.8 GiB (840 MiB more)"
	if rec.Summary != want {
		t.Errorf("summary %q, want %q", rec.Summary, want)
	}
}

// A plain program's answer names no other allocator's settings, and lists each anomaly that needs
// action once, most serious first.
func TestAnswerOfAPlainProgram(t *testing.T) {
	a := analyzeEvents(t, handmade()).Answer
	var kinds []string
	for _, act := range a.Actions {
		kinds = append(kinds, act.Kind+": "+act.Summary)
	}
	want := []string{
		"failed-allocations: 1 failed allocation (1 TiB asked for), the first at seq 7",
		"leaks: 3 blocks never freed (73.8 KiB live at the end), the first at seq 8 from 0x400000",
		"double-frees: 1 double free, the first at seq 5 from 0x500000",
		"unknown-frees: 1 free of an unknown address, the first at seq 6 from 0x500000",
	}
	if len(kinds) != len(want) {
		t.Fatalf("actions %q, want %q", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Errorf("action %d: %q, want %q", i, kinds[i], want[i])
		}
	}
	if len(a.Equivalents) != 0 || a.Today.Allocator != schema.AllocatorRaw {
		t.Errorf("equivalents %q, today %+v", a.Equivalents, a.Today)
	}
}

// Within a capacity below its plan, the recommended pool cannot start: the answer says that
// nothing fits and what the plan needs, and compares nothing.
func TestAnswerWhenThePoolDoesNotFit(t *testing.T) {
	r, err := Analyze([]Input{fakeInput("handmade", handmade())}, Options{Capacity: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Combined.Answer
	rec := a.Recommendation
	const want = "nothing fits in 2 MiB: the recommended pool's plan alone needs 3 MiB"
	if rec.Kind != schema.AdviceNoneFits || rec.Summary != want || rec.PeakReservedBytes != 3151872 ||
		rec.MissBytes != 3151872-2<<20 || a.Savings.MemoryKnown || a.Savings.TimeKnown {
		t.Errorf("answer %s, want the summary %q", answerJSON(t, a), want)
	}
}
