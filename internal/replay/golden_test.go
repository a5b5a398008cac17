package replay

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestReportJSONGolden replays smallTrace on the simulated backend with a virtual clock, so every
// number of the report is exact, and compares its JSON with testdata/small.golden.json, which
// TestTextReportGolden renders as text.
func TestReportJSONGolden(t *testing.T) {
	rep, _ := simRun(t, Options{Verify: true, Touch: true})
	got, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const golden = "testdata/small.golden.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("report JSON differs from %s (run go test ./internal/replay -run Golden -update):\n%s", golden, got)
	}
}

// TestTextReportGolden renders the golden JSON report of TestReportJSONGolden as text (WriteText)
// and compares it with testdata/small.golden.txt, no line wider than 100 columns.
func TestTextReportGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/small.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteText(&got, &rep, "small.arrow", "pool.json"); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(got.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	const golden = "testdata/small.golden.txt"
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("text report differs from %s (run go test ./internal/replay -run Golden -update):\n%s", golden, got.String())
	}
}
