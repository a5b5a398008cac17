package analysis

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// textOf is the text report of inputs analyzed with opts.
func textOf(t *testing.T, opts Options, inputs ...Input) string {
	t.Helper()
	r, err := Analyze(inputs, opts)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// section is the block of report that starts with the line title (up to the next empty line).
func section(t *testing.T, report, title string) string {
	t.Helper()
	at := strings.Index(report, "\n"+title)
	if at < 0 {
		t.Fatalf("report lacks %q:\n%s", title, report)
	}
	block, _, _ := strings.Cut(report[at+1:], "\n\n")
	return strings.TrimRight(block, "\n") + "\n"
}

// The bundled trace's report opens with its answer: the lines after the trace's header.
func TestTextAnswerFirst(t *testing.T) {
	in := fileInput("../internal/cli/analyze/bundled/pytorch-train.arrow")
	in.Name = "internal/cli/analyze/bundled/pytorch-train.arrow" // as analyze names the bundled trace
	report := textOf(t, Options{}, in)
	const want = `ANSWER
  peak live          224 MiB
  allocator today    raw cudaMalloc, peak reserved 224 MiB (the trace's device memory)
  time in calls      34.5 ms inside allocation calls, 0.735% of 4.69 s wall time
  recommendation     serve the requests from allocscope's pool (analyze --emit-config pool.json,
                     then record --pool): peak reserved 228.5 MiB
  memory vs today    costs 4.5 MiB more (2.03% of today's 224 MiB)
  time vs today      saves 34.4 ms (99.8% of the 34.5 ms in allocation calls)
  needs action       9 blocks never freed (193.3 MiB live at the end), the first at seq 10 from
                     0x7f5190bb45ee
`
	lines := strings.SplitN(report, "\n", 4)
	if got := section(t, report, "ANSWER"); got != want || !strings.HasPrefix(lines[3], "ANSWER\n") {
		t.Errorf("the report starts\n%s\nwant its fourth line to open\n%s", strings.Join(lines[:3], "\n"), want)
	}
	// The sizing rules are behind --explain; the PyTorch search and its setting are shown (the
	// command runs torch), the RMM and cudaMemPool equivalents are not (no RMM, no stream-ordered
	// requests).
	for _, absent := range []string{"k rule:", "threshold rule:", "arena rule:", "RMM pool_memory_resource",
		"cudaMemPoolAttrReleaseThreshold", "pytorch-tuned"} {
		if strings.Contains(report, absent) {
			t.Errorf("report holds %q", absent)
		}
	}
	for _, present := range []string{"\n  (the rules that chose k, the threshold and the arena: analyze --explain)\n",
		"\n  PYTORCH_CUDA_ALLOC_CONF=(defaults are best)\n", "\nPYTORCH_CUDA_ALLOC_CONF (43 settings simulated",
		"\n  pytorch-expandable   expandable_segments:True; 124 page operations; reserves 8 MiB more than the\n" +
			"                       defaults\n",
		"\n                    raw    224 MiB   1.000   2.8 KiB       0 B  1,785      0       0    today\n"} {
		if !strings.Contains(report, present) {
			t.Errorf("report lacks %q", present)
		}
	}
}

// A plain program of cudaMalloc calls gets no other allocator's settings and no PyTorch search; a
// policy whose model spends more time than the program did is explained as a cost.
func TestTextPlainProgram(t *testing.T) {
	report := textOf(t, Options{}, fakeInput("handmade", handmade()))
	const want = `RECOMMENDATION (pool.json, policy sizeclass)
  predicted: peak reserved 3 MiB for peak live 3 MiB, 1 upstream calls,
             0 fallbacks, 0 failures, allocator time saved 115 µs
  record --pool: peak reserved 3 MiB, 0 fallbacks, 2 synchronizations of its own
`
	if got := section(t, report, "RECOMMENDATION"); got != want {
		t.Errorf("recommendation\n%s\nwant\n%s", got, want)
	}
	for _, absent := range []string{"PYTORCH_CUDA_ALLOC_CONF", "RMM pool_memory_resource", "cudaMemPool"} {
		if strings.Contains(report, absent) {
			t.Errorf("report holds %q", absent)
		}
	}
	const cost = "\n     pytorch-expandable    22 MiB   7.331      24 B    19 MiB      2      0       0  -85 µs\n"
	const note = "\n  a negative saved is a cost: the policy's model spends that much more time in calls\n"
	if !strings.Contains(report, cost) || !strings.Contains(report, note) {
		t.Errorf("report lacks %q or %q", cost, note)
	}
}

// A snapshot has no call durations: every time it cannot know is n/a, never 0.
func TestTextSnapshotTimesAreNA(t *testing.T) {
	report := textOf(t, Options{}, fileInput("torch/train.caching.snapshot.pickle.gz"))
	sims := section(t, report, "WHAT-IF SIMULATION")
	rows := strings.Split(sims, "\n")[3:10] // the header's two lines and the columns' names first
	for _, row := range rows {
		if !strings.HasSuffix(row, "  n/a") {
			t.Errorf("what-if row %q: saved is not n/a", row)
		}
	}
	for _, want := range []string{"\n  time in calls      n/a (the trace has no call durations)\n",
		"in calls n/a (no call durations)\n", "allocator time saved n/a (no call durations)\n"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(report, " 0 ns") || strings.Contains(report, "0s") {
		t.Errorf("report writes a zero time:\n%s", report)
	}
}

// Within a capacity where no setting fits, the recommendation says so plainly: no "(defaults are
// best)", no "peak reserved 0 B".
func TestTextNothingFits(t *testing.T) {
	report := textOf(t, Options{Capacity: 1 << 30}, fileInput("torch/cnn.caching.snapshot.pickle.gz"))
	const answer = "  recommendation     nothing fits in 1 GiB: the closest PYTORCH_CUDA_ALLOC_CONF setting,\n" +
		"                     expandable_segments:True, needs 1.8 GiB (840 MiB more)\n" +
		"  memory vs today    n/a (nothing fits)\n"
	const rec = `RECOMMENDATION (pool.json, policy sizeclass)
  the pool does not fit the capacity: analyze --emit-config writes no pool.json
  PYTORCH_CUDA_ALLOC_CONF=(no setting fits in 1 GiB: the closest needs 1.8 GiB)
`
	if got := section(t, report, "RECOMMENDATION"); got != rec || !strings.Contains(report, answer) {
		t.Errorf("recommendation\n%s\nwant\n%s\nand the answer to hold\n%s", got, rec, answer)
	}
	for _, absent := range []string{"defaults are best", "peak reserved 0 B"} {
		if strings.Contains(report, absent) {
			t.Errorf("report holds %q", absent)
		}
	}
}

// README.md and docs/analyze.md show the bundled trace's first screen as analyze writes it.
func TestDocsShowTheAnswer(t *testing.T) {
	in := fileInput("../internal/cli/analyze/bundled/pytorch-train.arrow")
	in.Name = "internal/cli/analyze/bundled/pytorch-train.arrow" // as analyze names the bundled trace
	report := textOf(t, Options{}, in)
	first := strings.Join(strings.SplitAfter(report, "\n")[:14], "")
	for _, doc := range []string{"../../README.md", "../../docs/analyze.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "```\n"+first+"```\n") {
			t.Errorf("%s does not show the report's first screen:\n%s", doc, first)
		}
	}
}
