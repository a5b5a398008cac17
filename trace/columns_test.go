package trace

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// referenceEvents decodes the Arrow trace at path without this package's reader: arrow-go's file
// reader and one value lookup per cell, by column name. It returns the events and the batch sizes.
func referenceEvents(t *testing.T, path string) ([]Event, []int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := ipc.NewFileReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	var events []Event
	var sizes []int
	for i := range fr.NumRecords() {
		rec, err := fr.RecordBatchAt(i)
		if err != nil {
			t.Fatal(err)
		}
		for row := range int(rec.NumRows()) {
			events = append(events, referenceRow(t, rec, row))
		}
		sizes = append(sizes, int(rec.NumRows()))
		rec.Release()
	}
	return events, sizes
}

// referenceRow returns row of rec as an Event.
func referenceRow(t *testing.T, rec arrow.RecordBatch, row int) Event {
	col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
	u64 := func(name string) uint64 { return col(name).(*array.Uint64).Value(row) }
	str := func(name string) string {
		switch a := col(name).(type) {
		case *array.Dictionary:
			return a.Dictionary().(*array.String).Value(a.GetValueIndex(row))
		case *array.String:
			return a.Value(row)
		}
		t.Fatalf("column %s has type %s", name, col(name).DataType())
		return ""
	}
	e := Event{Seq: u64("seq"), TimeNs: col("time_ns").(*array.Int64).Value(row),
		DurationNs: col("duration_ns").(*array.Int64).Value(row), PID: col("pid").(*array.Uint32).Value(row),
		TID: col("tid").(*array.Uint32).Value(row), Device: col("device").(*array.Int32).Value(row),
		Function: str("function"), Size: u64("size"), Address: u64("address"), Handle: u64("handle"),
		Stream: u64("stream"), Result: col("result").(*array.Int32).Value(row), Callsite: u64("callsite")}
	var err [3]error
	e.Op, err[0] = ParseOp(str("op"))
	e.Memory, err[1] = ParseMemory(str("memory"))
	e.Layer, err[2] = ParseLayer(str("layer"))
	if err != [3]error{} {
		t.Fatalf("row %d: %v", row, err)
	}
	if len(rec.Schema().FieldIndices("pool")) > 0 {
		e.Pool = col("pool").(*array.Uint8).Value(row) != 0
	}
	return e
}

// readColumns reads path to the end with NextColumns and the given read-ahead and a checked
// allocator; it returns the events of every row (Columns.Event) and the batch sizes.
func readColumns(t *testing.T, path string, ahead int) ([]Event, []int) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	r, err := Open(path, WithReadAllocator(alloc), WithReadAhead(ahead))
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	var sizes []int
	for {
		c, err := r.NextColumns()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.Len() {
			events = append(events, c.Event(i))
		}
		sizes = append(sizes, c.Len())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	alloc.AssertSize(t, 0)
	return events, sizes
}

// testdataArrow returns the Arrow traces under ../testdata.
func testdataArrow(t *testing.T) []string {
	var paths []string
	err := filepath.WalkDir("../testdata", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".arrow") {
			paths = append(paths, path)
		}
		return err
	})
	if err != nil || len(paths) < 10 {
		t.Fatalf("%d Arrow traces under ../testdata (%v)", len(paths), err)
	}
	return paths
}

// Next and NextColumns, with and without read-ahead, yield exactly the events and batches that an
// independent decoder finds in every Arrow trace of testdata.
func TestColumnsMatchReferenceOnTestdata(t *testing.T) {
	for _, path := range testdataArrow(t) {
		want, wantSizes := referenceEvents(t, path)
		got, sizes, _ := readAll(t, path)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(sizes, wantSizes) {
			t.Errorf("%s: Next: %d events in batches %v, want %d in %v", path, len(got), sizes, len(want), wantSizes)
		}
		for _, ahead := range []int{0, 1, 3} {
			got, sizes := readColumns(t, path, ahead)
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(sizes, wantSizes) {
				t.Errorf("%s: NextColumns with read-ahead %d: %d events in batches %v, want %d in %v",
					path, ahead, len(got), sizes, len(want), wantSizes)
			}
		}
	}
}

// A trace of 1000 batches reads back in order, whatever the read-ahead, and Next and NextColumns
// interleave: each returns the batch after the last one either returned.
func TestColumnsManyBatchesInOrder(t *testing.T) {
	events := syntheticEvents(100_000)
	path := writeTrace(t, testInfo(), events, WithBatchRows(100))
	for _, ahead := range []int{0, 1, 2, 7, 64} {
		got, sizes := readColumns(t, path, ahead)
		if len(sizes) != 1000 || !reflect.DeepEqual(got, events) {
			t.Fatalf("read-ahead %d: %d batches, %d events (equal: %v), want 1000 batches of the written events",
				ahead, len(sizes), len(got), reflect.DeepEqual(got, events))
		}
	}
	r, err := Open(path, WithReadAhead(4))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Event
	for i := 0; ; i++ {
		if i%2 == 0 {
			batch, err := r.Next()
			if err == io.EOF {
				break
			}
			got = append(got, batch...)
			continue
		}
		c, err := r.NextColumns()
		if err == io.EOF {
			break
		}
		for j := range c.Len() {
			got = append(got, c.Event(j))
		}
	}
	if !reflect.DeepEqual(got, events) {
		t.Errorf("Next and NextColumns in turn: %d events, not the %d written", len(got), len(events))
	}
}

// Closing a Reader whose batches are being decoded ahead releases every buffer, at any point.
func TestColumnsCloseWhileReadingAhead(t *testing.T) {
	path := writeTrace(t, testInfo(), syntheticEvents(20_000), WithBatchRows(100))
	for _, read := range []int{0, 1, 2, 50, 199, 200, 201} {
		alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
		r, err := Open(path, WithReadAllocator(alloc), WithReadAhead(8))
		if err != nil {
			t.Fatal(err)
		}
		for range read {
			if _, err := r.NextColumns(); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.NextColumns(); err == nil || (read <= 200 && !strings.Contains(err.Error(), "read after close")) {
			t.Errorf("NextColumns after Close, %d batches read: %v", read, err)
		}
		alloc.AssertSize(t, 0)
	}
}

// The columns of the formats that are not stored by column (PyTorch snapshots, RMM CSV) are those
// of the events Next returns.
func TestColumnsOfImportedTraces(t *testing.T) {
	for _, name := range []string{"snapshot_small.pickle.gz", "snapshot_old_proto2.pickle", "rmm_timeofday.csv", "rmm_epoch.csv"} {
		path := filepath.Join(fixtures, name)
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var want []Event
		var wantSizes []int
		for {
			batch, err := r.Next()
			if err != nil {
				break
			}
			want, wantSizes = append(want, batch...), append(wantSizes, len(batch))
		}
		r.Close()
		got, sizes := readColumns(t, path, 2)
		if len(want) == 0 || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(sizes, wantSizes) {
			t.Errorf("%s: NextColumns: %d events in %v, Next: %d in %v", name, len(got), sizes, len(want), wantSizes)
		}
	}
}

// drainBoth reads data to the end with Next without read-ahead and with NextColumns with read-ahead
// 3; it returns what each read and its error.
func drainBoth(data []byte) (next, cols []Event, nextErr, colsErr error) {
	read := func(ahead int, f func(r *Reader, out *[]Event) error) ([]Event, error) {
		r, err := newReader("in.arrow", bytes.NewReader(data), int64(len(data)), nil, WithReadAhead(ahead))
		if err != nil {
			return nil, err
		}
		defer r.Close()
		var out []Event
		for {
			if err := f(r, &out); err != nil {
				if err == io.EOF {
					err = nil
				}
				return out, err
			}
		}
	}
	next, nextErr = read(0, func(r *Reader, out *[]Event) error {
		b, err := r.Next()
		*out = append(*out, b...)
		return err
	})
	cols, colsErr = read(3, func(r *Reader, out *[]Event) error {
		c, err := r.NextColumns()
		if err == nil {
			for i := range c.Len() {
				*out = append(*out, c.Event(i))
			}
		}
		return err
	})
	return next, cols, nextErr, colsErr
}

// checkSameOutcome fails t unless reading data by column with read-ahead returns exactly the
// events and the error of reading it event by event without, and that error is one line naming the
// file. It returns the error.
func checkSameOutcome(t *testing.T, data []byte) error {
	next, cols, nextErr, colsErr := drainBoth(data)
	if fmt.Sprint(nextErr) != fmt.Sprint(colsErr) || !reflect.DeepEqual(next, cols) {
		t.Fatalf("Next: %d events, error %v; NextColumns with read-ahead: %d events, error %v",
			len(next), nextErr, len(cols), colsErr)
	}
	if colsErr != nil && (!strings.HasPrefix(colsErr.Error(), "in.arrow: ") || strings.Contains(colsErr.Error(), "\n")) {
		t.Errorf("error is not one line naming the file: %q", colsErr)
	}
	return colsErr
}

// A trace damaged in any of its batches reads by column with read-ahead as it reads without: the
// batches before the damage, then the same error, naming the batch.
func TestColumnsCorruptBatches(t *testing.T) {
	data, err := os.ReadFile(writeTrace(t, testInfo(), syntheticEvents(3000), WithBatchRows(100)))
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{len(data) / 3, len(data) / 2, len(data) - 100, len(data) - 1} {
		checkSameOutcome(t, data[:cut])
	}
	errs := 0
	for off := 8; off < len(data)-1000; off += len(data) / 100 {
		bad := bytes.Clone(data)
		bad[off] ^= 0x5a
		if err := checkSameOutcome(t, bad); err != nil && strings.Contains(err.Error(), ": batch ") {
			errs++
		}
	}
	if errs < 20 {
		t.Errorf("%d damaged traces failed at a batch, want at least 20", errs)
	}
}

// FuzzNextColumns: NextColumns with read-ahead never panics and returns exactly what Next without
// read-ahead returns, the same events and the same one-line error naming the file.
func FuzzNextColumns(f *testing.F) {
	addSeeds(f, "small.arrow")
	f.Fuzz(func(t *testing.T, data []byte) { checkSameOutcome(t, data) })
}
