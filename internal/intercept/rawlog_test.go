package intercept

import (
	"github.com/allocscope/allocscope/internal/testcuda"

	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// The Go function table and the one in shim/common.h must agree id by id.
func TestFunctionTableMatchesShim(t *testing.T) {
	re := regexp.MustCompile(`X\((\d+), (\w+), (\w+), (\w+), (\w+)\)`)
	files, _ := shimFiles()
	matches := re.FindAllStringSubmatch(string(files["shim/common.h"]), -1)
	if len(matches) != len(functionTable)-1 {
		t.Fatalf("shim.c has %d functions, rawlog.go %d", len(matches), len(functionTable)-1)
	}
	for _, m := range matches {
		id, _ := strconv.Atoi(m[1])
		fi := functionTable[id]
		got := fmt.Sprintf("%s %s %s %s", fi.Name, fi.Op, fi.Memory, fi.Layer)
		if want := strings.Join(m[2:], " "); got != want {
			t.Errorf("function id %d: rawlog.go has %q, shim.c %q", id, got, want)
		}
		if !slices.Contains(trace.KnownFunctions(), fi.Name) {
			t.Errorf("function %q is not among trace.KnownFunctions", fi.Name)
		}
	}
}

func TestOpenRawLogRejectsBadHeaders(t *testing.T) {
	good := encodeRawLog(rawHeader{PID: 7}, []rawRecord{{Seq: 1, TimeNs: 5, Function: 1}})
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:100] }, "x.alog: header: file has 100 bytes, a raw log has at least 4096"},
		{"magic", func(b []byte) []byte { copy(b, "NOTALOG!"); return b }, `x.alog: header: bad magic "NOTALOG!", not an allocscope raw log`},
		{"format 1", func(b []byte) []byte { copy(b, "ALSCOPE1"); return b }, "x.alog: header: raw log format 1, written by an earlier allocscope: convert it with that version"},
		{"zeros", func(b []byte) []byte { clear(b); return b }, "x.alog: header: empty header: the process could not finish creating its log"},
		{"version", func(b []byte) []byte { b[8] = 9; return b }, "x.alog: header: format version 9, this allocscope reads version 2"},
		{"record size", func(b []byte) []byte { b[12] = 32; return b }, "x.alog: header: record size 32, want 64"},
		{"lane slots", func(b []byte) []byte { b[64], b[65] = 0, 0; return b }, "x.alog: header: lanes of 0 records, want 1 to 1048576"},
		{"lanes per group", func(b []byte) []byte { b[68] = 65; return b }, "x.alog: header: 65 lanes per group, want 1 to 64"},
		{"command line", func(b []byte) []byte { b[76], b[77] = 0xff, 0xff; return b }, "x.alog: header: command line length 65535 exceeds 4016"},
	}
	for _, c := range cases {
		b := c.mutate(slices.Clone(good))
		_, err := openRawLog("x.alog", bytes.NewReader(b), int64(len(b)), nil, 0)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestScanRunRejectsCorruptRecords(t *testing.T) {
	cases := []struct {
		rec  rawRecord
		want string
	}{
		{rawRecord{Function: 31}, "x.alog: chunk 0: record 1: unknown function id 31"},
		{rawRecord{Function: 1, Device: -2}, "x.alog: chunk 0: record 1: device ordinal -2"},
		{rawRecord{Function: 1, TimeNs: -1}, "x.alog: chunk 0: record 1: negative time -1 ns"},
		{rawRecord{Function: 1, DurationNs: -5}, "x.alog: chunk 0: record 1: negative duration -5 ns"},
	}
	for _, c := range cases {
		recs := []rawRecord{{Seq: 0, Function: 1}, c.rec}
		b := encodeRawLog(rawHeader{}, recs)
		l, err := openRawLog("x.alog", bytes.NewReader(b), int64(len(b)), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = readAllRecords(l); err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	lanes := encodeLanes(rawHeader{}, []testLane{{head: laneHead{State: 2, Count: 1025}}})
	b := encodeRawLog(rawHeader{}, nil)
	if _, err := openRawLog("x.alog", bytes.NewReader(b), int64(len(b)), bytes.NewReader(lanes), int64(len(lanes))); err == nil ||
		err.Error() != "x.alog: lane 0: 1025 records, a lane holds 1024" {
		t.Errorf("lane count: %v", err)
	}
}

// A log as a killed process leaves it: two full chunks, a third chunk claimed but never written
// (past the end of the file), lanes with unflushed records (one owned, one freed by an exited thread,
// one never used, one emptied), a lane whose flush was cut short after the first two of its three
// records reached chunk 1, and events counted as lost in the header and the lanes.
func TestRawLogReadsChunksAndLanes(t *testing.T) {
	h := rawHeader{PID: 3, LaneSlots: 4, LanesPerGroup: 2, Chunks: 3, Lost: 5}
	rec := func(seq uint64) rawRecord { return rawRecord{Seq: seq, TimeNs: 1, Function: 1, Size: seq} }
	var chunks []rawRecord
	for _, seq := range []uint64{0, 1, 2, 3, 10, 11, 0, 0} { // chunk 1: two records then never written
		chunks = append(chunks, rec(seq))
	}
	chunks[6], chunks[7] = rawRecord{}, rawRecord{}
	log := encodeRawLog(h, chunks)
	lanes := encodeLanes(h, []testLane{
		{laneHead{State: 1, Count: 2, Lost: 1}, []rawRecord{rec(4), rec(5), rec(99)}}, // 99: stale, past count
		{laneHead{State: 2, Count: 1}, []rawRecord{rec(6)}},
		{laneHead{State: 0}, []rawRecord{rec(98)}},
		{laneHead{State: 1, Count: 0, Lost: 2}, []rawRecord{rec(97)}},
		{laneHead{State: 1, Count: 3, FlushChunk: 2}, []rawRecord{rec(10), rec(11), rec(12)}},
	})
	l, err := openRawLog("x.alog", bytes.NewReader(log), int64(len(log)), bytes.NewReader(lanes), int64(len(lanes)))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readAllRecords(l)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
	}
	if want := []uint64{0, 1, 2, 3, 10, 11, 4, 5, 6, 12}; !slices.Equal(seqs, want) || l.lost != 8 {
		t.Errorf("seqs %v lost %d, want %v and 8", seqs, l.lost, want)
	}
	if len(l.runs) != 5 || l.runs[0].name != "chunk 0" || l.runs[4].name != "lane 4" {
		t.Errorf("runs %d: %+v", len(l.runs), l.runs)
	}
	// Without the lanes file only the chunks are read.
	if l, err = openRawLog("x.alog", bytes.NewReader(log), int64(len(log)), nil, 0); err != nil || len(l.runs) != 2 || l.lanes {
		t.Errorf("no lanes: %d runs, lanes %v, err %v; want 2 runs", len(l.runs), l.lanes, err)
	}
}

// Records far out of seq order within and across files, several segments each: Convert emits them in
// seq order, pairs frees of managed memory with their allocation, and computes the summary.
func TestConvertMergesOutOfOrderLogs(t *testing.T) {
	dir := t.TempDir()
	const n = 3 * testLaneSlots
	var a, b []rawRecord
	for i := range n {
		seq := uint64(2 * i)
		a = append(a, rawRecord{Seq: seq, TimeNs: int64(seq), Function: 1, Size: 100, Address: 0x1000 + seq, Device: 0})
		b = append(b, rawRecord{Seq: seq + 1, TimeNs: int64(seq), Function: 2, Size: 100, Address: 0x1000 + seq, Device: 0})
	}
	slices.Reverse(a) // worst case: every segment overlaps every other
	b[10], b[n-10] = b[n-10], b[10]
	writeLog(t, filepath.Join(dir, "1-1.alog"), rawHeader{PID: 1, StartMonoNs: 1, Command: []string{"first", "arg"}}, a)
	writeLog(t, filepath.Join(dir, "2-2.alog"), rawHeader{PID: 2, StartMonoNs: 2, Command: []string{"second"}}, b)
	var events eventList
	var progress []int64
	sum, err := convert(dir, &events, ConvertOptions{Progress: func(done, total int64) { progress = append(progress, done, total) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2*n {
		t.Fatalf("%d events, want %d", len(events), 2*n)
	}
	checkSeqs(t, events, 0)
	for i := range events {
		if wantPID := uint32(1 + i%2); events[i].PID != wantPID {
			t.Fatalf("event %d: pid %d, want %d", i, events[i].PID, wantPID)
		}
	}
	// Process 2 frees the addresses process 1 allocated: blocks not its own, so its frees free
	// nothing and every allocation stays live (as analyze counts a trace's requests).
	checkSummary(t, sum, Summary{Events: 2 * n, Processes: 2, Devices: []int32{0}, PeakLiveBytes: n * 100})
	if want := []int64{2 * n, 2 * n}; !slices.Equal(progress, want) { // one call at the end: under 65536 events
		t.Errorf("progress calls %v, want %v", progress, want)
	}
	if cmd, err := Command(dir); err != nil || !slices.Equal(cmd, []string{"first", "arg"}) {
		t.Errorf("Command = %q, %v", cmd, err)
	}
}

func writeLog(t *testing.T, path string, h rawHeader, recs []rawRecord) {
	t.Helper()
	for i := range recs {
		if recs[i].TimeNs == 0 {
			recs[i].TimeNs = 1
		}
		recs[i].DurationNs = 10
	}
	if err := os.WriteFile(path, encodeRawLog(h, recs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(strings.TrimSuffix(path, ".alog")+".lanes", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Managed memory freed by cudaFree is reported as managed and does not count against device bytes;
// empty slots are skipped; duplicate seqs, private counters and lost events become warnings.
func TestConvertSummaryAndWarnings(t *testing.T) {
	dir := t.TempDir()
	recs := []rawRecord{
		{Seq: 0, Function: 6, Size: 4096, Address: 0x300000000000, Device: -1}, // cudaMallocManaged
		{Seq: 1, Function: 1, Size: 1000, Address: 0x200000000000, Device: 2},  // cudaMalloc
		{}, // an empty slot
		{Seq: 2, Function: 2, Size: 4096, Address: 0x300000000000, Device: -1}, // cudaFree of the managed block
		{Seq: 2, Function: 25, Size: 1 << 21, Address: 0x1000, Device: 3},      // cuMemCreate, duplicate seq
		{Seq: 3, Function: 2, Size: 1000, Address: 0x200000000000, Device: 2},
		{Seq: 4, Function: 1, Size: 1 << 40, Result: 2, Device: -1}, // failed cudaMalloc
	}
	writeLog(t, filepath.Join(dir, "9-9.alog"), rawHeader{PID: 9, Flags: flagPrivateSeq | flagFailed, FailErrno: 28,
		Lost: 12, Command: []string{"prog", "arg"}}, recs)
	events, sum := convertDir(t, dir)
	if events[2].Memory != trace.MemoryManaged || events[2].Function != "cudaFree" {
		t.Errorf("free of managed memory: %s", testcuda.Render(&events[2]))
	}
	want := []string{
		"process 9 (prog arg) stopped recording: cannot write its log: no space left on device; 12 later events were not recorded",
		dir + "/9-9.alog: process 9 could not map the shared seq counter; its events are ordered by a private counter",
		"1 events share their seq with the event before (logs from more than one recording in one directory?)",
	}
	if !slices.Equal(sum.Warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(sum.Warnings, "\n"), strings.Join(want, "\n"))
	}
	sum.Warnings = nil
	checkSummary(t, sum, Summary{Events: 6, Processes: 1, Devices: []int32{2, 3}, PeakLiveBytes: 1000 + 1<<21, Lost: 12, ShimLoads: -1})
}

func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := convert(filepath.Join(dir, "missing"), &eventList{}, ConvertOptions{}); err == nil ||
		!strings.Contains(err.Error(), "missing: no such file or directory") {
		t.Errorf("missing dir: %v", err)
	}
	sum, err := convert(dir, &eventList{}, ConvertOptions{})
	if err != nil || sum.Events != 0 || len(sum.Warnings) != 1 {
		t.Errorf("empty dir: %+v, %v; want no events and one warning", sum, err)
	}
	if _, err := Command(dir); err == nil || err.Error() != dir+": no raw logs (*.alog)" {
		t.Errorf("Command of empty dir: %v", err)
	}
	writeLog(t, filepath.Join(dir, "1-1.alog"), rawHeader{}, []rawRecord{{Seq: 0, Function: 1}, {Seq: 1, Function: 99}})
	var events eventList
	_, err = convert(dir, &events, ConvertOptions{})
	if err == nil || err.Error() != dir+"/1-1.alog: chunk 0: record 1: unknown function id 99" {
		t.Errorf("corrupt record: %v", err)
	}
	if len(events) != 0 {
		t.Errorf("%d events written before the corrupt record was found, want 0", len(events))
	}
	if _, err := Convert(dir, nil, ConvertOptions{}); err == nil {
		t.Error("Convert with a nil writer succeeded")
	}
}

// Extra events are merged by time between the raw logs' events (a raw event first at an equal
// time, the rest after the last), every seq becomes the merged position, the summary counts them
// apart, and ClockOffsets gives each pid's wall-minus-monotonic difference from its log header.
func TestConvertMergesExtraEventsByTime(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, filepath.Join(dir, "1-1.alog"), rawHeader{PID: 1, StartMonoNs: 100, StartRealNs: 5100, Command: []string{"p"}},
		[]rawRecord{{Seq: 7, TimeNs: 200, Function: 1, Size: 64, Address: 0x1000}, {Seq: 9, TimeNs: 400, Function: 2, Size: 64, Address: 0x1000}})
	writeLog(t, filepath.Join(dir, "2-2.alog"), rawHeader{PID: 2, StartMonoNs: 150, StartRealNs: 9150, Command: []string{"q"}},
		[]rawRecord{{Seq: 8, TimeNs: 300, Function: 1, Size: 32, Address: 0x2000}})
	extra := []trace.Event{
		{TimeNs: 100, PID: 1, Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncTorchAlloc, Size: 8, Address: 0x1000},
		{TimeNs: 300, PID: 2, Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncCupyMalloc, Size: 4, Address: 0x2000},
		{TimeNs: 900, PID: 1, Op: trace.OpFree, Layer: trace.LayerFramework, Function: trace.FuncTorchFree, Size: 8, Address: 0x1000},
	}
	logs, err := OpenLogs(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if got, want := logs.ClockOffsets(), map[uint32]int64{1: 5000, 2: 9000}; !maps.Equal(got, want) {
		t.Errorf("clock offsets %v, want %v", got, want)
	}
	var events eventList
	sum, err := logs.convert(&events, ConvertOptions{Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%d %d %d %s", e.Seq, e.TimeNs, e.PID, e.Function))
	}
	want := []string{"0 100 1 torch.alloc", "1 200 1 cudaMalloc", "2 300 2 cudaMalloc", "3 300 2 cupy.malloc",
		"4 400 1 cudaFree", "5 900 1 torch.free"}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The framework's allocations are the trace's requests: peak live is theirs (8 + 4 bytes).
	if sum.Events != 6 || sum.Extra != 3 || sum.PeakLiveBytes != 12 {
		t.Errorf("summary events %d, extra %d, peak live %d; want 6, 3, 12", sum.Events, sum.Extra, sum.PeakLiveBytes)
	}
}
