package intercept

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/rawlog/*.alog from real runs of the test programs")

// FuzzRawLog feeds arbitrary bytes to the raw log reader, as the log file and as its ring file: it must
// return records that pass its own checks or an error naming the file, and never panic.
func FuzzRawLog(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "rawlog", "*.alog"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds in testdata/rawlog: %v", err)
	}
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(encodeRawLog(rawHeader{PID: 1, Claimed: 3, Drained: 1, RingSlots: 2},
		[]rawRecord{{Seq: 5, TimeNs: 1, Function: 1}, {Seq: 6, Function: 27}, {Seq: 7, Function: 30}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := openRawLog("fuzz.alog", bytes.NewReader(data), int64(len(data)), bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.alog: header: ") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q does not name the file and position on one line", err)
			}
			return
		}
		recs, skipped, err := l.readSlots(0, l.slots, nil, nil)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.alog: record ") {
				t.Fatalf("error %q does not name the file and record", err)
			}
			return
		}
		if int64(len(recs))+skipped != l.slots {
			t.Fatalf("%d records + %d skipped != %d slots", len(recs), skipped, l.slots)
		}
		for i := range recs {
			if recs[i].Function == 0 || recs[i].check() != nil {
				t.Fatalf("record %+v passed the reader", recs[i])
			}
			e := recs[i].event(&l.header)
			if e.Function == "" {
				t.Fatalf("record %+v has no function name", recs[i])
			}
		}
	})
}

// updateFuzzSeed rewrites testdata/rawlog/<name>.alog from the log of a real run when the tests run
// with -update-seeds: the process's log with every record drained into the log file.
func updateFuzzSeed(t *testing.T, name, dir string) {
	t.Helper()
	if !*updateSeeds {
		return
	}
	paths, err := rawLogPaths(dir)
	if err != nil || len(paths) != 1 {
		t.Fatalf("%s: logs %v, %v", name, paths, err)
	}
	lf, err := openLogFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := lf.log.readSlots(0, lf.log.slots, nil, nil)
	lf.close()
	if err != nil {
		t.Fatal(err)
	}
	h := lf.log.header
	h.Claimed, h.Drained, h.RingSlots = uint64(len(recs)), uint64(len(recs)), 0
	h.Command = []string{name}
	if err := os.WriteFile(filepath.Join("testdata", "rawlog", name+".alog"), encodeRawLog(h, recs), 0o644); err != nil {
		t.Fatal(err)
	}
}
