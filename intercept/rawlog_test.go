package intercept

import (
	"github.com/allocscope/allocscope/internal/testcuda"

	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// The Go function table and the one in shim.c must agree id by id.
func TestFunctionTableMatchesShim(t *testing.T) {
	re := regexp.MustCompile(`X\((\d+), (\w+), (\w+), (\w+), (\w+)\)`)
	matches := re.FindAllStringSubmatch(string(shimSource), -1)
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
	good := encodeRawLog(rawHeader{PID: 7, Claimed: 1, Drained: 1}, []rawRecord{{Seq: 1, TimeNs: 5, Function: 1}})
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:100] }, "x.alog: header: file has 100 bytes, a raw log has at least 4096"},
		{"magic", func(b []byte) []byte { copy(b, "NOTALOG!"); return b }, `x.alog: header: bad magic "NOTALOG!", not an allocscope raw log`},
		{"version", func(b []byte) []byte { b[8] = 9; return b }, "x.alog: header: format version 9, this allocscope reads version 1"},
		{"record size", func(b []byte) []byte { b[12] = 32; return b }, "x.alog: header: record size 32, want 64"},
		{"command line", func(b []byte) []byte { b[68], b[69] = 0xff, 0xff; return b }, "x.alog: header: command line length 65535 exceeds 4024"},
		{"ring", func(b []byte) []byte { b[67] = 2; return b }, "x.alog: header: ring of 33554432 slots exceeds 16777216"},
		{"drained", func(b []byte) []byte { b[56] = 2; return b }, "x.alog: header: 2 records drained but the file holds 1"},
	}
	for _, c := range cases {
		b := c.mutate(slices.Clone(good))
		_, err := openRawLog("x.alog", bytes.NewReader(b), int64(len(b)), nil, 0)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestReadSlotsRejectsCorruptRecords(t *testing.T) {
	cases := []struct {
		rec  rawRecord
		want string
	}{
		{rawRecord{Function: 31}, "x.alog: record 1: unknown function id 31"},
		{rawRecord{Function: 1, Device: -2}, "x.alog: record 1: device ordinal -2"},
		{rawRecord{Function: 1, TimeNs: -1}, "x.alog: record 1: negative time -1 ns"},
		{rawRecord{Function: 1, DurationNs: -5}, "x.alog: record 1: negative duration -5 ns"},
	}
	for _, c := range cases {
		recs := []rawRecord{{Seq: 0, Function: 1}, c.rec}
		b := encodeRawLog(rawHeader{Claimed: 2, Drained: 2}, recs)
		l, err := openRawLog("x.alog", bytes.NewReader(b), int64(len(b)), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = l.readSlots(0, l.slots, nil, nil)
		if err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// A log whose last records are still in the ring file (the process was killed): the drained slots come
// from the log file, the rest from the ring; uncommitted slots are skipped and counted.
func TestRawLogReadsRingTail(t *testing.T) {
	const ringSlots = 8
	var drained []rawRecord
	for i := range 16 {
		drained = append(drained, rawRecord{Seq: uint64(i), TimeNs: 1, Function: 1, Size: uint64(i)})
	}
	// Slots 16..21 live in the ring at 0..5; slot 19 was never committed; ring slots 6 and 7 are
	// outside [Drained, Claimed) and are not read.
	ring := make([]byte, ringSlots*rawRecordSize)
	for i := 16; i < 22; i++ {
		if i != 19 {
			encodeRecord(ring[(i%ringSlots)*rawRecordSize:], &rawRecord{Seq: uint64(i), TimeNs: 1, Function: 2, Size: uint64(i)})
		}
	}
	main := encodeRawLog(rawHeader{Claimed: 22, Drained: 16, RingSlots: ringSlots}, drained)
	// A drain cut short: slots 16 and 17 reached the log file; the drain then uncommitted ring slot 16
	// (0) and died before advancing Drained. Slot 16 must come from the log file, 17 from either.
	tail := make([]byte, 3*rawRecordSize)
	encodeRecord(tail, &rawRecord{Seq: 16, TimeNs: 1, Function: 2, Size: 16})
	encodeRecord(tail[rawRecordSize:], &rawRecord{Seq: 17, TimeNs: 1, Function: 2, Size: 17})
	main = append(main, tail...)
	clear(ring[:rawRecordSize])
	l, err := openRawLog("x.alog", bytes.NewReader(main), int64(len(main)), bytes.NewReader(ring), int64(len(ring)))
	if err != nil {
		t.Fatal(err)
	}
	if l.slots != 22 || l.trailing != 3*rawRecordSize || l.lost != 0 {
		t.Fatalf("slots %d trailing %d lost %d, want 22, 192, 0", l.slots, l.trailing, l.lost)
	}
	recs, skipped, err := l.readSlots(0, l.slots, nil, make([]byte, 3*rawRecordSize))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
	}
	want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21}
	if !slices.Equal(seqs, want) || skipped != 1 {
		t.Errorf("seqs %v skipped %d, want %v and 1", seqs, skipped, want)
	}
	// Without the ring file the tail is reported lost.
	l, err = openRawLog("x.alog", bytes.NewReader(main), int64(len(main)), nil, 0)
	if err != nil || l.slots != 16 || l.lost != 6 {
		t.Errorf("no ring: slots %d lost %d err %v, want 16, 6", l.slots, l.lost, err)
	}
}

// Records far out of seq order within and across files, several segments each: Convert emits them in
// seq order, pairs frees of managed memory with their allocation, and computes the summary.
func TestConvertMergesOutOfOrderLogs(t *testing.T) {
	dir := t.TempDir()
	const n = 3 * segSlots
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
	checkSummary(t, sum, Summary{Events: 2 * n, Processes: 2, Devices: []int32{0}, PeakLiveBytes: 100})
	if want := []int64{2 * n, 2 * n}; !slices.Equal(progress, want) { // one call at the end: under 65536 events
		t.Errorf("progress calls %v, want %v", progress, want)
	}
	if cmd, err := Command(dir); err != nil || !slices.Equal(cmd, []string{"first", "arg"}) {
		t.Errorf("Command = %q, %v", cmd, err)
	}
}

func writeLog(t *testing.T, path string, h rawHeader, recs []rawRecord) {
	t.Helper()
	h.Claimed, h.Drained = uint64(len(recs)), uint64(len(recs))
	for i := range recs {
		if recs[i].TimeNs == 0 {
			recs[i].TimeNs = 1
		}
		recs[i].DurationNs = 10
	}
	if err := os.WriteFile(path, encodeRawLog(h, recs), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Managed memory freed by cudaFree is reported as managed and does not count against device bytes;
// uncommitted slots, duplicate seqs and private counters become warnings.
func TestConvertSummaryAndWarnings(t *testing.T) {
	dir := t.TempDir()
	recs := []rawRecord{
		{Seq: 0, Function: 6, Size: 4096, Address: 0x300000000000, Device: -1}, // cudaMallocManaged
		{Seq: 1, Function: 1, Size: 1000, Address: 0x200000000000, Device: 2},  // cudaMalloc
		{}, // uncommitted
		{Seq: 2, Function: 2, Size: 4096, Address: 0x300000000000, Device: -1}, // cudaFree of the managed block
		{Seq: 2, Function: 25, Size: 1 << 21, Address: 0x1000, Device: 3},      // cuMemCreate, duplicate seq
		{Seq: 3, Function: 2, Size: 1000, Address: 0x200000000000, Device: 2},
		{Seq: 4, Function: 1, Size: 1 << 40, Result: 2, Device: -1}, // failed cudaMalloc
	}
	writeLog(t, filepath.Join(dir, "9-9.alog"), rawHeader{PID: 9, Flags: flagPrivateSeq}, recs)
	events, sum := convertDir(t, dir)
	if events[2].Memory != trace.MemoryManaged || events[2].Function != "cudaFree" {
		t.Errorf("free of managed memory: %s", testcuda.Render(&events[2]))
	}
	want := []string{
		dir + "/9-9.alog: 1 uncommitted records skipped (a thread stopped mid-record)",
		dir + "/9-9.alog: process 9 could not map the shared seq counter; its events are ordered by a private counter",
		"1 events share their seq with the event before (logs from more than one recording in one directory?)",
	}
	if !slices.Equal(sum.Warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(sum.Warnings, "\n"), strings.Join(want, "\n"))
	}
	sum.Warnings = nil
	checkSummary(t, sum, Summary{Events: 6, Processes: 1, Devices: []int32{2, 3}, PeakLiveBytes: 1000 + 1<<21})
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
	if err == nil || err.Error() != dir+"/1-1.alog: record 1: unknown function id 99" {
		t.Errorf("corrupt record: %v", err)
	}
	if len(events) != 0 {
		t.Errorf("%d events written before the corrupt record was found, want 0", len(events))
	}
	if _, err := Convert(dir, nil, ConvertOptions{}); err == nil {
		t.Error("Convert with a nil writer succeeded")
	}
}
