package analysis

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// badInputs are the files under testdata that are not traces on purpose (errors' tests).
var badInputs = []string{"not_a_snapshot.pickle", "rmm_bad_row.csv"}

// traceFiles lists the bundled trace and every trace and snapshot under the repository's testdata:
// Arrow traces, PyTorch snapshots (plain, gzip, xz) and RMM logs, but for badInputs.
func traceFiles(t *testing.T) []string {
	t.Helper()
	out := []string{filepath.Join("..", "cli", "analyze", "bundled", "pytorch-train.arrow")}
	err := filepath.WalkDir(filepath.Join("..", "..", "testdata"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || slices.Contains(badInputs, d.Name()) {
			return err
		}
		for _, ext := range []string{".arrow", ".pickle", ".pickle.gz", ".pickle.xz", ".csv"} {
			if strings.HasSuffix(path, ext) {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every line of the text report of every trace and snapshot under testdata, the bundled trace
// among them, with and without the sizing rules, and within a capacity nothing fits (where the
// analysis must still complete: a pool too large for it is reported, not an error), is at most 100
// columns (runes) wide.
func TestTextReportsFit100Columns(t *testing.T) {
	files := traceFiles(t)
	if len(files) < 20 {
		t.Fatalf("%d trace files under testdata, want at least 20: %q", len(files), files)
	}
	for _, path := range files {
		t.Run(strings.TrimPrefix(path, "../../testdata/"), func(t *testing.T) {
			in := Input{Name: path, Open: func() (Source, error) { return trace.Open(path) }}
			for _, opts := range []Options{{}, {Capacity: 64 << 20}} {
				r, err := Analyze([]Input{in}, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, explain := range []bool{false, true} {
					var buf bytes.Buffer
					if err := WriteTextWith(&buf, r, TextOptions{Explain: explain}); err != nil {
						t.Fatal(err)
					}
					checkWidth(t, buf.String())
				}
			}
		})
	}
}

// checkWidth fails for each line of report wider than 100 runes.
func checkWidth(t *testing.T, report string) {
	t.Helper()
	for i, line := range strings.Split(report, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
	}
}

// The report of several inputs with long paths (RANKS and the inputs' line) fits 100 columns too.
func TestTextReportOfSeveralInputsFits100Columns(t *testing.T) {
	var inputs []Input
	for _, path := range []string{"torch/train.caching.snapshot.pickle.gz", "trace/rmm_epoch.csv",
		"h200/d_torch_caching_train.arrow"} {
		inputs = append(inputs, fileInput(path))
	}
	report := textOf(t, Options{}, inputs...)
	checkWidth(t, report)
	const ranks = "\n  ...hing.snapshot.pickle.gz   2,675   95.7 MiB   98.3 MiB       0   240.5 MiB          0       n/a\n"
	if !strings.Contains(report, ranks) {
		t.Errorf("report lacks the RANKS row %q", ranks)
	}
}
