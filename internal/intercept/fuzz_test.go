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

// FuzzRawLog feeds arbitrary bytes to the raw log reader, as the log file and as its lanes file: it
// must return records that pass its own checks or an error naming the file, and never panic.
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
	small := rawHeader{PID: 1, LaneSlots: 2, LanesPerGroup: 2}
	f.Add(encodeRawLog(small, []rawRecord{{Seq: 5, TimeNs: 1, Function: 1}, {Seq: 6, Function: 27}, {Seq: 7, Function: 30}}))
	lanes := encodeLanes(small, []testLane{{laneHead{State: 1, Count: 1, FlushChunk: 2}, []rawRecord{{Seq: 7, Function: 30}}}})
	f.Add(append(encodeRawLog(small, []rawRecord{{Seq: 5, TimeNs: 1, Function: 1}}), lanes...))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := openRawLog("fuzz.alog", bytes.NewReader(data), int64(len(data)), bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !(strings.HasPrefix(err.Error(), "fuzz.alog: header: ") || strings.HasPrefix(err.Error(), "fuzz.alog: lane ")) ||
				strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q does not name the file and position on one line", err)
			}
			return
		}
		recs, err := readAllRecords(l)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.alog: chunk ") && !strings.HasPrefix(err.Error(), "fuzz.alog: lane ") {
				t.Fatalf("error %q does not name the file and run", err)
			}
			return
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
// with -update-seeds: the process's log with every record in its chunks.
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
	recs, err := readAllRecords(lf.log)
	lf.close()
	if err != nil {
		t.Fatal(err)
	}
	h := lf.log.header
	h.Chunks = 0
	h.Command = []string{name}
	if err := os.WriteFile(filepath.Join("testdata", "rawlog", name+".alog"), encodeRawLog(h, recs), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadMaps: a module maps file is outside input (any process can write into the log
// directory): reading it never panics, and every module it yields is a non-empty range with a path.
func FuzzReadMaps(f *testing.F) {
	f.Add([]byte("56412be67000-56412be6b000 r-xp 00002000 fe:00 247849 /usr/bin/true\n"))
	f.Add([]byte("7f00-7e00 r-xp 0 0:0 0 /lib/x.so\nzz-yy r-xp 0 0 0 /a b\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range parseMaps(bytes.NewReader(data), 7) {
			if m.End <= m.Start || m.PID != 7 || !strings.HasPrefix(m.Path, "/") {
				t.Errorf("module %+v from %q", m, data)
			}
		}
	})
}
