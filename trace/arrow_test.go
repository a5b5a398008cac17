package trace

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// syntheticEvents returns n deterministic events that exercise every field and enum value.
func syntheticEvents(n int) []Event {
	events := make([]Event, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range events {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		events[i] = Event{
			Seq:        uint64(i),
			TimeNs:     int64(i)*1000 + int64(x%1000),
			DurationNs: int64(x % 100000),
			PID:        uint32(1000 + i%3),
			TID:        uint32(2000 + x%17),
			Device:     int32(x%9) - 1,
			Op:         Op(i % int(opCount)),
			Memory:     Memory(x % uint64(memoryCount)),
			Layer:      Layer(i % int(layerCount)),
			Function:   knownFunctions[int(x>>8)%syntheticFunctions],
			Size:       x >> 20,
			Address:    0x7f0000000000 + x%(1<<30),
			Handle:     x % 5,
			Stream:     x % 3,
			Result:     int32(x % 4),
			Callsite:   0x400000 + x%4096,
		}
	}
	return events
}

// syntheticFunctions is how many of knownFunctions syntheticEvents draws from: the names known
// when testdata/trace/small.arrow was written (names added since, such as cupy.malloc, come after),
// so that the fixture still holds syntheticEvents(300).
const syntheticFunctions = 44

func testInfo() Info {
	return Info{
		FormatVersion:   FormatVersion,
		Source:          SourceAllocscope,
		Command:         []string{"python3", "train.py", "--epochs", "3"},
		Host:            "h200-01",
		StartTime:       time.Date(2026, 12, 2, 16, 24, 40, 123456789, time.UTC),
		RecorderVersion: "0.1.0",
		DriverVersion:   "580.159.04",
		GPUNames:        []string{"NVIDIA H200", "NVIDIA H200"},
		Pool:            json.RawMessage(`{"syncs":3,"sync_ns":41000,"reservations":2,"passed_by":{"capture":4}}`),
		Modules:         []Module{{PID: 41, Start: 0x400000, End: 0x401000, Offset: 0x1000, Path: "/usr/bin/train"}},
		Framework: []FrameworkCapture{
			{PID: 41, Framework: FrameworkTorch, Events: 12, Entries: 16, MaxEntries: 16, Full: true,
				OOM: json.RawMessage(`{"device":0,"segments":[{"address":4096}]}`)},
			{PID: 42, Framework: FrameworkCupy, Events: 4, Entries: 5, Dropped: 1},
		},
	}
}

// writeTrace writes events to a new file in t's temp dir with a checked allocator and
// returns its path.
func writeTrace(t testing.TB, info Info, events []Event, opts ...WriterOption) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.arrow")
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	w, err := Create(path, info, append([]WriterOption{WithAllocator(alloc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if err := w.Write(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	alloc.AssertSize(t, 0)
	return path
}

// readAll reads every event of path with a checked allocator; it returns the events, the
// batch sizes and the Info.
func readAll(t testing.TB, path string) ([]Event, []int, Info) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	r, err := Open(path, WithReadAllocator(alloc))
	if err != nil {
		t.Fatal(err)
	}
	var all []Event
	var sizes []int
	if done, _ := r.Progress(); done != 0 {
		t.Errorf("progress before the first batch = %d, want 0", done)
	}
	for {
		batch, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(batch))
		all = append(all, batch...)
	}
	if done, total := r.Progress(); done != total || done != int64(len(sizes)) {
		t.Errorf("progress at the end = %d of %d, want %d of %d", done, total, len(sizes), len(sizes))
	}
	info := r.Info()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	alloc.AssertSize(t, 0)
	return all, sizes, info
}

func TestRoundTripManyBatches(t *testing.T) {
	events := syntheticEvents(200000)
	path := writeTrace(t, testInfo(), events)
	got, sizes, _ := readAll(t, path)
	if want := []int{65536, 65536, 65536, 3392}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("batch sizes = %v, want %v", sizes, want)
	}
	if len(got) != len(events) {
		t.Fatalf("read %d events, want %d", len(got), len(events))
	}
	for i := range events {
		if got[i] != events[i] {
			t.Fatalf("event %d = %+v, want %+v", i, got[i], events[i])
		}
	}
}

func TestRoundTripSmallBatchesAndEmpty(t *testing.T) {
	events := syntheticEvents(10)
	got, sizes, _ := readAll(t, writeTrace(t, testInfo(), events, WithBatchRows(4)))
	if want := []int{4, 4, 2}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("batch sizes = %v, want %v", sizes, want)
	}
	if !reflect.DeepEqual(got, events) {
		t.Errorf("events differ after round trip")
	}
	got, sizes, _ = readAll(t, writeTrace(t, testInfo(), nil))
	if len(got) != 0 || len(sizes) != 0 {
		t.Errorf("empty trace read back %d events in %d batches, want 0 in 0", len(got), len(sizes))
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	info := testInfo()
	_, _, got := readAll(t, writeTrace(t, info, syntheticEvents(3)))
	if !reflect.DeepEqual(got, info) {
		t.Errorf("info = %+v, want %+v", got, info)
	}
	// Optional fields left empty come back empty; Source defaults to allocscope.
	_, _, got = readAll(t, writeTrace(t, Info{Host: "h"}, nil))
	want := Info{FormatVersion: FormatVersion, Source: SourceAllocscope, Host: "h"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("info = %+v, want %+v", got, want)
	}
}

// Info's opaque values (Pool, FrameworkCapture.OOM) are written compacted and read back as
// written; an OOM of null (from another writer) reads as none; a value that is not a JSON object
// is refused by the writer, naming the field.
func TestMetadataOpaqueValues(t *testing.T) {
	info := Info{Pool: json.RawMessage(" {\"syncs\": 2,\n \"passed_by\": {\"full\": 1}} "),
		Framework: []FrameworkCapture{{PID: 4, Framework: FrameworkTorch, OOM: json.RawMessage(`{ "device": 1 }`)}}}
	_, _, got := readAll(t, writeTrace(t, info, nil))
	if string(got.Pool) != `{"syncs":2,"passed_by":{"full":1}}` || len(got.Framework) != 1 ||
		string(got.Framework[0].OOM) != `{"device":1}` {
		t.Errorf("read back pool %s, framework %+v; want them compacted", got.Pool, got.Framework)
	}
	md := map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":3,"framework":"torch","events":0,"entries":0,"oom":null}]`}
	r, err := Open(customArrow(t, layoutFields(), md, 1, func(col string, _ int) any {
		return defaultValue(layoutFields()[slices.IndexFunc(layoutFields(), func(f arrow.Field) bool { return f.Name == col })])
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f := r.Info().Framework; len(f) != 1 || f[0].PID != 3 || f[0].OOM != nil {
		t.Errorf("an oom of null: framework %+v, want pid 3 without one", f)
	}
	for _, c := range []struct {
		info Info
		want string
	}{
		{Info{Pool: json.RawMessage(`[1]`)}, `trace writer: info: pool activity: not a JSON object: "[1]"`},
		{Info{Pool: json.RawMessage(`{"syncs":`)}, `trace writer: info: pool activity: not a JSON object: "{\"syncs\":"`},
		{Info{Framework: []FrameworkCapture{{Framework: FrameworkCupy}, {Framework: FrameworkTorch, OOM: json.RawMessage(`null`)}}},
			`trace writer: info: framework capture 1: oom: not a JSON object: "null"`},
	} {
		if _, err := NewWriter(io.Discard, c.info); err == nil || err.Error() != c.want {
			t.Errorf("NewWriter: %v, want %s", err, c.want)
		}
	}
}

func TestWriterRejectsUnknownFunctionAndEnums(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testInfo())
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(&Event{Seq: 7, Function: "myMalloc"})
	if err == nil || err.Error() != `trace writer: event seq 7: function "myMalloc" is not in the writer's dictionary (add it with trace.WithFunctions)` {
		t.Errorf("unknown function: err = %v", err)
	}
	err = w.Write(&Event{Seq: 8, Op: opCount})
	if err == nil || err.Error() != "trace writer: event seq 8: invalid op(11)/device/runtime" {
		t.Errorf("bad op: err = %v", err)
	}
	if w.Count() != 0 {
		t.Errorf("Count = %d after rejected events, want 0", w.Count())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// WithFunctions makes the name writable.
	ev := []Event{{Seq: 1, Function: "myMalloc", Op: OpAlloc, Size: 64}}
	got, _, _ := readAll(t, writeTrace(t, testInfo(), ev, WithFunctions("myMalloc")))
	if !reflect.DeepEqual(got, ev) {
		t.Errorf("got %+v, want %+v", got, ev)
	}
}

func TestWriterAllocatesNothingPerEvent(t *testing.T) {
	w, err := NewWriter(io.Discard, testInfo(), WithBatchRows(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	events := syntheticEvents(1000)
	allocs := testing.AllocsPerRun(10, func() {
		for i := range events {
			if err := w.Write(&events[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Write allocated %.1f times per 1000 events, want 0", allocs)
	}
}

func TestSchemaColumns(t *testing.T) {
	s := schemaFor(testInfo())
	var got []string
	for _, f := range s.Fields() {
		unit, _ := f.Metadata.GetValue(fieldUnitKey)
		got = append(got, f.Name+":"+f.Type.String()+":"+unit)
	}
	want := "seq:uint64:,time_ns:int64:ns,duration_ns:int64:ns,pid:uint32:,tid:uint32:,device:int32:," +
		"op:dictionary<values=utf8, indices=int8, ordered=false>:,memory:dictionary<values=utf8, indices=int8, ordered=false>:," +
		"layer:dictionary<values=utf8, indices=int8, ordered=false>:,function:dictionary<values=utf8, indices=int16, ordered=false>:," +
		"size:uint64:bytes,address:uint64:,handle:uint64:,stream:uint64:,result:int32:,callsite:uint64:,pool:uint8:"
	if strings.Join(got, ",") != want {
		t.Errorf("schema =\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	for _, f := range s.Fields() {
		if d, ok := f.Metadata.GetValue(fieldDescriptionKey); !ok || d == "" {
			t.Errorf("column %s has no description", f.Name)
		}
	}
}

func TestCreateUnwritableDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "run.arrow")
	_, err := Create(path, testInfo())
	if err == nil || !strings.HasPrefix(err.Error(), "create trace "+path+": open "+path) {
		t.Errorf("err = %v", err)
	}
	if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
		t.Errorf("file exists after failed Create")
	}
}

// The pool column: written and read back; a trace without it (written before record --pool) reads
// with Pool false.
func TestPoolColumn(t *testing.T) {
	events := []Event{{Seq: 1, Op: OpAlloc, Memory: MemoryDevice, Layer: LayerRuntime, Function: "cudaMalloc",
		Size: 512, Address: 0x1000, Pool: true}, {Seq: 2, Op: OpAlloc, Memory: MemoryDevice, Layer: LayerRuntime,
		Function: "cudaMalloc", Size: 512, Address: 0x2000}}
	got, _, _ := readAll(t, writeTrace(t, testInfo(), events))
	if len(got) != 2 || !got[0].Pool || got[1].Pool {
		t.Errorf("read back %+v", got)
	}
	old, _, _ := readAll(t, filepath.Join("..", "internal", "cli", "analyze", "bundled", "pytorch-train.arrow"))
	for i := range old {
		if old[i].Pool {
			t.Fatalf("event %d of a trace without the column has Pool set", i)
		}
	}
	if len(old) != 1787 {
		t.Errorf("the bundled trace (no pool column) read %d events, want 1787", len(old))
	}
}
