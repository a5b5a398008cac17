package replay

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestReportJSONGolden replays smallTrace on the simulated backend with a virtual clock, so every
// number of the report is exact, and compares its JSON with testdata/small.golden.json. The CLI's
// text golden test reads the same file.
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
		t.Errorf("report JSON differs from %s (run go test ./replay -run Golden -update):\n%s", golden, got)
	}
}
