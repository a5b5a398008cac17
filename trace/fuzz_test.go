package trace

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/trace/small.arrow")

const smallArrow = fixtures + "/small.arrow"

// TestSmallArrowFixture checks that the committed small.arrow (written by an earlier build)
// still reads back exactly: 300 synthetic events in batches of 128, 128, 44. Run with -update
// to rewrite it after an intended format change.
func TestSmallArrowFixture(t *testing.T) {
	events := syntheticEvents(300)
	if *update {
		old := testInfo()
		old.Pool, old.Modules, old.Framework = nil, nil, nil
		data, err := os.ReadFile(writeTrace(t, old, events, WithBatchRows(128)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(smallArrow, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, sizes, info := readAll(t, smallArrow)
	want := testInfo()
	want.Pool, want.Modules, want.Framework = nil, nil, nil // the fixture predates these keys: an older trace reads without them
	if !reflect.DeepEqual(sizes, []int{128, 128, 44}) || !reflect.DeepEqual(got, events) || !reflect.DeepEqual(info, want) {
		t.Errorf("small.arrow: batches %v, %d events, info %+v; want [128 128 44], syntheticEvents(300), testInfo()", sizes, len(got), info)
	}
}

// fuzzOpen reads data as a trace: it must not panic, and an error must be one line naming the file.
func fuzzOpen(t *testing.T, data []byte) {
	err := readBytes("fuzz.in", data)
	if err != nil && (!strings.HasPrefix(err.Error(), "fuzz.in: ") || strings.Contains(err.Error(), "\n")) {
		t.Errorf("error is not one line naming the file: %q", err)
	}
}

func addSeeds(f *testing.F, names ...string) {
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzOpenArrow(f *testing.F) {
	addSeeds(f, "small.arrow")
	f.Fuzz(fuzzOpen)
}

func FuzzOpenSnapshot(f *testing.F) {
	addSeeds(f, "snapshot_small.pickle", "snapshot_small.pickle.gz", "snapshot_small.pickle.xz",
		"snapshot_old_proto2.pickle", "not_a_snapshot.pickle")
	f.Fuzz(fuzzOpen)
}

func FuzzOpenRMMCSV(f *testing.F) {
	addSeeds(f, "rmm_timeofday.csv", "rmm_epoch.csv", "rmm_bad_row.csv")
	f.Fuzz(fuzzOpen)
}
