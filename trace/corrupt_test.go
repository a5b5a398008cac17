package trace

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// openAndDrain opens path and reads it to the end; it returns the first error, or nil.
func openAndDrain(path string) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// readBytes reads the trace in data, named name, to the end; it returns the first error, or nil.
func readBytes(name string, data []byte) error {
	r, err := newReader(name, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// checkOneLineError asserts that err is a single line naming path.
func checkOneLineError(t *testing.T, path string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", path)
	}
	if !strings.HasPrefix(err.Error(), path+": ") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line starting with the file name: %q", err)
	}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTruncatedArrow(t *testing.T) {
	full, err := os.ReadFile(writeTrace(t, testInfo(), syntheticEvents(1000), WithBatchRows(300)))
	if err != nil {
		t.Fatal(err)
	}
	n := len(full)
	for _, size := range []int{0, 3, 6, 8, 20, 100, n / 3, n / 2, n - 100, n - 11, n - 1} {
		path := writeFile(t, "cut.arrow", full[:size])
		err := openAndDrain(path)
		checkOneLineError(t, path, err)
		var want string
		switch {
		case size == 0:
			want = path + ": empty file"
		case size < 6:
			want = path + `: byte offset 0: unknown trace format (first bytes "ARR")`
		case size < 20:
			want = fmt.Sprintf("%s: byte offset %d: Arrow file truncated (%d bytes)", path, size, size)
		default:
			want = fmt.Sprintf("%s: byte offset %d: no Arrow end marker: file truncated or not closed by its writer", path, size)
		}
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("cut at %d of %d: err = %q, want prefix %q", size, n, err, want)
		}
	}
}

// TestCorruptArrowBytes flips bytes all over a valid file: every outcome is a one-line error
// naming the file or a clean read, never a panic or a fatal out-of-memory.
func TestCorruptArrowBytes(t *testing.T) {
	events := syntheticEvents(500)
	full, err := os.ReadFile(writeTrace(t, testInfo(), events, WithBatchRows(200)))
	if err != nil {
		t.Fatal(err)
	}
	errorsSeen := 0
	for off := 8; off < len(full)-6; off += 5 {
		data := bytes.Clone(full)
		data[off] ^= 0xa5
		if err := readBytes("flip.arrow", data); err != nil {
			checkOneLineError(t, "flip.arrow", err)
			errorsSeen++
		}
	}
	if errorsSeen == 0 {
		t.Errorf("no corruption was detected")
	}
}

func TestWrongMagicAndUnknownFormats(t *testing.T) {
	for data, want := range map[string]string{
		"ARROX1\x00\x00garbage":     `byte offset 0: unknown trace format (first bytes "ARROX1\x00\x00garbage")`,
		"hello, world\n":            `byte offset 0: unknown trace format (first bytes "hello, world\n")`,
		"Thread,Time,Action\n1,2\n": `line 1: header "Thread,Time,Action", want Thread,Time,Action,Pointer,Size,Stream`,
	} {
		path := writeFile(t, "x", []byte(data))
		err := openAndDrain(path)
		if err == nil || !strings.HasPrefix(err.Error(), path+": "+want) {
			t.Errorf("%q: err = %v, want %s: %s", data, err, path, want)
		}
	}
}

// customArrow writes an Arrow file with the given fields and schema metadata; value gives the
// value of column col at row (nil for null).
func customArrow(t *testing.T, fields []arrow.Field, md map[string]string, rows int, value func(col string, row int) any) string {
	t.Helper()
	m := arrow.MetadataFrom(md)
	schema := arrow.NewSchema(fields, &m)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, f := range fields {
		for row := 0; row < rows; row++ {
			appendValue(t, b.Field(i), value(f.Name, row))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "custom.arrow", buf.Bytes())
}

func appendValue(t *testing.T, b array.Builder, v any) {
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.Uint64Builder:
		b.Append(v.(uint64))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Uint32Builder:
		b.Append(v.(uint32))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Uint8Builder:
		b.Append(v.(uint8))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.BinaryDictionaryBuilder:
		if err := b.AppendString(v.(string)); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no appender for %T", b)
	}
}

// defaultValue gives a valid value for every column type of the layout.
func defaultValue(f arrow.Field) any {
	switch f.Type.ID() {
	case arrow.UINT64:
		return uint64(1)
	case arrow.INT64:
		return int64(1)
	case arrow.UINT32:
		return uint32(1)
	case arrow.INT32:
		return int32(1)
	case arrow.UINT8:
		return uint8(1)
	}
	switch f.Name {
	case "op":
		return "alloc"
	case "memory":
		return "device"
	case "layer":
		return "driver"
	}
	return "cuMemAlloc_v2"
}

func layoutFields() []arrow.Field {
	return schemaFor(Info{}).Fields()
}

func validMetadata() map[string]string {
	return map[string]string{metaFormatVersion: "1", metaSource: "test"}
}

func TestSchemaAndVersionErrors(t *testing.T) {
	fields := layoutFields()
	byName := func(fs []arrow.Field) func(string, int) any {
		return func(col string, _ int) any {
			for _, f := range fs {
				if f.Name == col {
					return defaultValue(f)
				}
			}
			return nil
		}
	}
	wrongType := layoutFields()
	wrongType[10].Type = arrow.PrimitiveTypes.Int64 // size
	missing := append(layoutFields()[:3:3], layoutFields()[4:]...)
	cases := []struct {
		name   string
		fields []arrow.Field
		md     map[string]string
		want   string
	}{
		{"no version", fields, map[string]string{}, `schema: not an allocscope trace: schema metadata has no "allocscope.format_version"`},
		{"wrong version", fields, map[string]string{metaFormatVersion: "2"}, "schema: format version 2 is not supported (this build reads version 1)"},
		{"bad version", fields, map[string]string{metaFormatVersion: "one"}, `schema: schema metadata "allocscope.format_version": bad value "one"`},
		{"bad command", fields, map[string]string{metaFormatVersion: "1", metaCommand: "python"}, `schema: schema metadata "allocscope.command": not a JSON array of strings: "python"`},
		{"wrong type", wrongType, validMetadata(), `schema: column "size" has type int64, want uint64`},
		{"missing column", missing, validMetadata(), `schema: column "pid" is missing`},
		{"framework not JSON", fields, map[string]string{metaFormatVersion: "1", metaFramework: "torch"},
			`schema: schema metadata "allocscope.framework": invalid character 'o' in literal true (expecting 'r')`},
		{"framework unknown field", fields, map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":1,"framework":"torch","events":1,"entries":1,"lost":2}]`},
			`schema: schema metadata "allocscope.framework": json: unknown field "lost"`},
		{"framework unknown name", fields, map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":1,"framework":"jax","events":1,"entries":1}]`},
			`schema: schema metadata "allocscope.framework": entry 0: unknown framework "jax"`},
		{"framework negative", fields, map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":1,"framework":"cupy","events":-1,"entries":1}]`},
			`schema: schema metadata "allocscope.framework": entry 0: negative count`},
		{"framework full unbounded", fields, map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":1,"framework":"torch","events":1,"entries":1,"full":true}]`},
			`schema: schema metadata "allocscope.framework": entry 0: full without max_entries`},
		{"framework oom not an object", fields, map[string]string{metaFormatVersion: "1", metaFramework: `[{"pid":1,"framework":"torch","events":1,"entries":1,"oom":[3]}]`},
			`schema: schema metadata "allocscope.framework": entry 0: oom: not a JSON object: "[3]"`},
		{"pool not JSON", fields, map[string]string{metaFormatVersion: "1", metaPool: `{"syncs":`},
			`schema: schema metadata "allocscope.pool": not a JSON object: "{\"syncs\":"`},
		{"pool not an object", fields, map[string]string{metaFormatVersion: "1", metaPool: `  [1, 2]`},
			`schema: schema metadata "allocscope.pool": not a JSON object: "  [1, 2]"`},
	}
	for _, c := range cases {
		path := customArrow(t, c.fields, c.md, 2, byName(c.fields))
		err := openAndDrain(path)
		if want := path + ": " + c.want; err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %s", c.name, err, want)
		}
	}
}

func TestBadValuesAtRow(t *testing.T) {
	// Plain (not dictionary) string columns are accepted, as pyarrow may write them.
	plain := layoutFields()
	for i := range plain {
		if _, ok := plain[i].Type.(*arrow.DictionaryType); ok {
			plain[i].Type = arrow.BinaryTypes.String
		}
	}
	cases := []struct {
		name   string
		fields []arrow.Field
		col    string
		row    int
		value  any
		want   string
	}{
		{"unknown op (dictionary)", layoutFields(), "op", 1, "bogus", `batch 0 row 1: column "op": unknown op "bogus"`},
		{"unknown layer (plain)", plain, "layer", 2, "kernel", `batch 0 row 2: column "layer": unknown layer "kernel"`},
		{"null size", layoutFields(), "size", 2, nil, `batch 0 row 2: column "size": null value`},
		{"null function", plain, "function", 0, nil, `batch 0 row 0: column "function": null value`},
	}
	for _, c := range cases {
		path := customArrow(t, c.fields, validMetadata(), 3, func(col string, row int) any {
			if col == c.col && row == c.row {
				return c.value
			}
			for _, f := range c.fields {
				if f.Name == col {
					return defaultValue(f)
				}
			}
			return nil
		})
		err := openAndDrain(path)
		if want := path + ": " + c.want; err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %s", c.name, err, want)
		}
	}

	// A file with plain strings and no bad value reads back.
	path := customArrow(t, plain, validMetadata(), 2, func(col string, _ int) any {
		for _, f := range plain {
			if f.Name == col {
				return defaultValue(f)
			}
		}
		return nil
	})
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drain(t, r)
	want := Event{Seq: 1, TimeNs: 1, DurationNs: 1, PID: 1, TID: 1, Device: 1, Op: OpAlloc, Layer: LayerDriver,
		Function: "cuMemAlloc_v2", Size: 1, Address: 1, Handle: 1, Stream: 1, Result: 1, Callsite: 1, Pool: true}
	if len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("events = %+v, want 2 × %+v", got, want)
	}
}

func TestBadPickles(t *testing.T) {
	small, err := os.ReadFile(filepath.Join(fixtures, "snapshot_small.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(small)
	zw.Close()
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"list at top", mustRead(t, filepath.Join(fixtures, "not_a_snapshot.pickle")), "not a PyTorch memory snapshot: top-level object is a list, want a dict"},
		{"dict without traces", []byte("\x80\x04}\x94."), `not a PyTorch memory snapshot: no "device_traces" key`},
		{"truncated in a frame", small[:len(small)/2], fmt.Sprintf("byte offset 2: pickle opcode 0x95: length %d exceeds the %d bytes left", len(small)-11, len(small)/2-11)},
		{"truncated", []byte("\x80\x02}q\x00"), "byte offset 5: pickle truncated (no STOP opcode)"},
		{"huge frame", []byte("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f"), "byte offset 2: pickle opcode 0x95: length 9223372036854775807 exceeds the 0 bytes left"},
		{"huge string", []byte("\x80\x04\x8d\x00\x00\x00\x00\x01\x00\x00\x00abc."), "byte offset 2: pickle opcode 0x8d: length 4294967296 exceeds the 4 bytes left"},
		{"bad opcode", []byte("\x80\x04\xff."), "byte offset 2: unknown pickle opcode 0xff"},
		{"bad entry", []byte("\x80\x02}(X\r\x00\x00\x00device_traces]]K\x01aau."), "device_traces[0][0]: an int, want a dict"},
		{"truncated gzip", gz.Bytes()[:gz.Len()-20], "gzip data, after "},
		{"gzip of text", gzipBytes([]byte("hello")), `gzip data is not a pickle (first bytes "hello")`},
	}
	for _, c := range cases {
		path := writeFile(t, "bad.pickle", c.data)
		err := openAndDrain(path)
		checkOneLineError(t, path, err)
		if err != nil && !strings.HasPrefix(err.Error(), path+": "+c.want) {
			t.Errorf("%s: err = %v, want prefix %s: %s", c.name, err, path, c.want)
		}
	}
}

func TestBadCSV(t *testing.T) {
	header := "Thread,Time,Action,Pointer,Size,Stream\n"
	cases := map[string]string{
		header + "1,00:00:01.0,allocate,0x10,8,0x0\n1,2,3\n":               "line 3: wrong number of fields",
		header + "1,00:00:01.0,reserve,0x10,8,0x0\n":                       `line 2: column Action: unknown action "reserve"`,
		header + "1,25:00:01.0,allocate,0x10,8,0x0\n":                      `line 2: column Time: bad time "25:00:01.0", want HH:MM:SS.ffffff`,
		header + "1,00:00:01.0,allocate,0xzz,8,0x0\n":                      `line 2: column Pointer: bad hexadecimal value "0xzz"`,
		header + "x,00:00:01.0,allocate,0x10,8,0x0\n":                      `line 2: column Thread: bad thread id "x"`,
		header + "1,00:00:01.0,allocate,0x10,8,\n":                         `line 2: column Stream: bad hexadecimal value ""`,
		header + "1,00:00:01.0,allocate,0x10,8,0x0\n1,\"x,00:00,a,1,2,3\n": `line 3: extraneous or missing " in quoted-field`,
	}
	for data, want := range cases {
		path := writeFile(t, "bad.csv", []byte(data))
		err := openAndDrain(path)
		if err == nil || err.Error() != path+": "+want {
			t.Errorf("%q: err = %v, want %s: %s", data, err, path, want)
		}
	}
}

func TestEmptyRMMLogHasNoEvents(t *testing.T) {
	path := writeFile(t, "empty.csv", []byte("Thread,Time,Action,Pointer,Size,Stream\n"))
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := drain(t, r); len(got) != 0 {
		t.Errorf("got %d events, want 0", len(got))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
