package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DefaultBatchRows is the number of rows per record batch a Writer writes by default.
const DefaultBatchRows = 65536

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	alloc       memory.Allocator
	batchRows   int
	functions   []string
	compressNP  int
	compression bool
	zstdLevel   int
}

// WithAllocator makes the Writer take its Arrow buffers from alloc (default memory.DefaultAllocator).
func WithAllocator(alloc memory.Allocator) WriterOption {
	return func(c *writerConfig) { c.alloc = alloc }
}

// WithBatchRows sets the number of rows per record batch (default DefaultBatchRows).
func WithBatchRows(n int) WriterOption { return func(c *writerConfig) { c.batchRows = n } }

// WithFunctions adds function names to the Writer's dictionary, beyond KnownFunctions.
// Writing an event whose Function is in neither list is an error.
func WithFunctions(names ...string) WriterOption {
	return func(c *writerConfig) { c.functions = append(c.functions, names...) }
}

// WithCompressConcurrency sets how many goroutines compress the columns of a batch
// (default 1: on a 2-core machine more goroutines do not pay; see docs/benchmarks.md).
func WithCompressConcurrency(n int) WriterOption { return func(c *writerConfig) { c.compressNP = n } }

// withZstdLevel sets the zstd level (arrow-go maps 1-2 to its fastest preset, 3-5 to its
// default); for benchmarks only.
func withZstdLevel(level int) WriterOption { return func(c *writerConfig) { c.zstdLevel = level } }

// withoutCompression writes uncompressed buffers; for benchmarks only.
func withoutCompression() WriterOption { return func(c *writerConfig) { c.compression = false } }

// Writer writes events to an Arrow IPC file, DefaultBatchRows rows per zstd-compressed
// record batch. It does not allocate per event. A Writer is not safe for concurrent use.
type Writer struct {
	cfg    writerConfig
	buf    *bufio.Writer
	file   *os.File // set by Create; closed by Close
	fw     *ipc.FileWriter
	schema *arrow.Schema

	cols  [numColumns]*memory.Buffer
	dicts [numColumns]arrow.Array // dictionaries of the string columns, nil for others

	// Typed views of cols.
	seq, size, address, handle, stream, callsite []uint64
	timeNs, durationNs                           []int64
	pid, tid                                     []uint32
	device, result                               []int32
	op, mem, layer                               []int8
	function                                     []int16

	n          int // rows in the current batch
	written    uint64
	funcIndex  map[string]int16
	lastFunc   string
	lastFuncIx int16
	err        error
	closed     bool
}

// NewWriter starts an Arrow IPC file on w. The caller closes w after Close.
func NewWriter(w io.Writer, info Info, opts ...WriterOption) (*Writer, error) {
	cfg := writerConfig{alloc: memory.DefaultAllocator, batchRows: DefaultBatchRows, compressNP: 1, compression: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.batchRows <= 0 {
		return nil, fmt.Errorf("trace writer: batch rows must be positive, got %d", cfg.batchRows)
	}
	tw := &Writer{cfg: cfg, buf: bufio.NewWriterSize(w, 1<<20), schema: schemaFor(info)}
	if err := tw.buildFunctionIndex(); err != nil {
		return nil, err
	}
	ipcOpts := []ipc.Option{ipc.WithSchema(tw.schema), ipc.WithAllocator(cfg.alloc)}
	if cfg.compression {
		ipcOpts = append(ipcOpts, ipc.WithZstdLevel(cfg.zstdLevel), ipc.WithCompressConcurrency(cfg.compressNP))
	}
	fw, err := ipc.NewFileWriter(tw.buf, ipcOpts...)
	if err != nil {
		return nil, fmt.Errorf("trace writer: %w", err)
	}
	tw.fw = fw
	tw.buildDictionaries()
	tw.allocColumns()
	return tw, nil
}

// Create creates the file at path and starts a Writer on it; Close closes the file.
func Create(path string, info Info, opts ...WriterOption) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create trace %s: %w", path, err)
	}
	w, err := NewWriter(f, info, opts...)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("create trace %s: %w", path, err)
	}
	w.file = f
	return w, nil
}

func (w *Writer) buildFunctionIndex() error {
	names := append(append([]string(nil), knownFunctions...), w.cfg.functions...)
	w.funcIndex = make(map[string]int16, len(names))
	var unique []string
	for _, n := range names {
		if _, dup := w.funcIndex[n]; dup {
			continue
		}
		if len(unique) > math.MaxInt16 {
			return fmt.Errorf("trace writer: more than %d function names", math.MaxInt16+1)
		}
		w.funcIndex[n] = int16(len(unique))
		unique = append(unique, n)
	}
	w.cfg.functions = unique
	w.lastFunc, w.lastFuncIx = "", w.funcIndex[""]
	return nil
}

func (w *Writer) buildDictionaries() {
	w.dicts[colOp] = stringArray(w.cfg.alloc, opNames[:])
	w.dicts[colMemory] = stringArray(w.cfg.alloc, memoryNames[:])
	w.dicts[colLayer] = stringArray(w.cfg.alloc, layerNames[:])
	w.dicts[colFunction] = stringArray(w.cfg.alloc, w.cfg.functions)
}

func stringArray(alloc memory.Allocator, values []string) arrow.Array {
	b := array.NewStringBuilder(alloc)
	defer b.Release()
	b.AppendValues(values, nil)
	return b.NewArray()
}

// allocColumns allocates one buffer per column for a full batch and sets the typed views.
// The buffers are reused for every batch.
func (w *Writer) allocColumns() {
	rows := w.cfg.batchRows
	for i, c := range columnSpecs {
		width := 0
		switch t := c.typ.(type) {
		case *arrow.DictionaryType:
			width = t.IndexType.(arrow.FixedWidthDataType).Bytes()
		case arrow.FixedWidthDataType:
			width = t.Bytes()
		}
		b := memory.NewResizableBuffer(w.cfg.alloc)
		b.Resize(rows * width)
		w.cols[i] = b
	}
	w.seq = arrow.Uint64Traits.CastFromBytes(w.cols[colSeq].Bytes())[:rows]
	w.timeNs = arrow.Int64Traits.CastFromBytes(w.cols[colTimeNs].Bytes())[:rows]
	w.durationNs = arrow.Int64Traits.CastFromBytes(w.cols[colDurationNs].Bytes())[:rows]
	w.pid = arrow.Uint32Traits.CastFromBytes(w.cols[colPID].Bytes())[:rows]
	w.tid = arrow.Uint32Traits.CastFromBytes(w.cols[colTID].Bytes())[:rows]
	w.device = arrow.Int32Traits.CastFromBytes(w.cols[colDevice].Bytes())[:rows]
	w.op = arrow.Int8Traits.CastFromBytes(w.cols[colOp].Bytes())[:rows]
	w.mem = arrow.Int8Traits.CastFromBytes(w.cols[colMemory].Bytes())[:rows]
	w.layer = arrow.Int8Traits.CastFromBytes(w.cols[colLayer].Bytes())[:rows]
	w.function = arrow.Int16Traits.CastFromBytes(w.cols[colFunction].Bytes())[:rows]
	w.size = arrow.Uint64Traits.CastFromBytes(w.cols[colSize].Bytes())[:rows]
	w.address = arrow.Uint64Traits.CastFromBytes(w.cols[colAddress].Bytes())[:rows]
	w.handle = arrow.Uint64Traits.CastFromBytes(w.cols[colHandle].Bytes())[:rows]
	w.stream = arrow.Uint64Traits.CastFromBytes(w.cols[colStream].Bytes())[:rows]
	w.result = arrow.Int32Traits.CastFromBytes(w.cols[colResult].Bytes())[:rows]
	w.callsite = arrow.Uint64Traits.CastFromBytes(w.cols[colCallsite].Bytes())[:rows]
}

// Write appends one event. It returns an error for an event whose Op, Memory or Layer is not
// one of the package's constants or whose Function the Writer does not know; the event is
// then not written and the Writer stays usable.
func (w *Writer) Write(e *Event) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("trace writer: write after close")
	}
	fi, err := w.functionIndex(e)
	if err != nil {
		return err
	}
	i := w.n
	w.seq[i] = e.Seq
	w.timeNs[i] = e.TimeNs
	w.durationNs[i] = e.DurationNs
	w.pid[i] = e.PID
	w.tid[i] = e.TID
	w.device[i] = e.Device
	w.op[i] = int8(e.Op)
	w.mem[i] = int8(e.Memory)
	w.layer[i] = int8(e.Layer)
	w.function[i] = fi
	w.size[i] = e.Size
	w.address[i] = e.Address
	w.handle[i] = e.Handle
	w.stream[i] = e.Stream
	w.result[i] = e.Result
	w.callsite[i] = e.Callsite
	w.n++
	if w.n == w.cfg.batchRows {
		return w.flush()
	}
	return nil
}

// functionIndex validates the enum fields of e and returns the dictionary index of its Function.
func (w *Writer) functionIndex(e *Event) (int16, error) {
	if e.Op >= opCount || e.Memory >= memoryCount || e.Layer >= layerCount {
		return 0, fmt.Errorf("trace writer: event seq %d: invalid %s/%s/%s", e.Seq, e.Op, e.Memory, e.Layer)
	}
	if e.Function == w.lastFunc {
		return w.lastFuncIx, nil
	}
	fi, ok := w.funcIndex[e.Function]
	if !ok {
		return 0, fmt.Errorf("trace writer: event seq %d: function %q is not in the writer's dictionary (add it with trace.WithFunctions)", e.Seq, e.Function)
	}
	w.lastFunc, w.lastFuncIx = e.Function, fi
	return fi, nil
}

// flush writes the rows collected so far as one record batch.
func (w *Writer) flush() error {
	if w.n == 0 {
		return nil
	}
	cols := make([]arrow.Array, numColumns)
	for i, c := range columnSpecs {
		bufs := []*memory.Buffer{nil, w.cols[i]}
		var data *array.Data
		if d := w.dicts[i]; d != nil {
			data = array.NewDataWithDictionary(c.typ, w.n, bufs, 0, 0, d.Data().(*array.Data))
		} else {
			data = array.NewData(c.typ, w.n, bufs, nil, 0, 0)
		}
		cols[i] = array.MakeFromData(data)
		data.Release()
	}
	rec := array.NewRecordBatch(w.schema, cols, int64(w.n))
	for _, c := range cols {
		c.Release()
	}
	err := w.fw.Write(rec)
	rec.Release()
	if err != nil {
		w.err = fmt.Errorf("trace writer: batch %d: %w", w.written/uint64(w.cfg.batchRows), err)
		return w.err
	}
	w.written += uint64(w.n)
	w.n = 0
	return nil
}

// Close flushes the last batch and the file footer, releases all buffers, and closes the
// file if the Writer was made by Create.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	err := w.flush()
	w.closed = true
	if cerr := w.fw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("trace writer: %w", cerr)
	}
	if ferr := w.buf.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("trace writer: %w", ferr)
	}
	for i := range w.cols {
		w.cols[i].Release()
		if w.dicts[i] != nil {
			w.dicts[i].Release()
		}
	}
	if w.file != nil {
		if cerr := w.file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("trace writer: %w", cerr)
		}
	}
	return err
}

// Count returns the number of events written so far, including those not yet flushed.
func (w *Writer) Count() uint64 { return w.written + uint64(w.n) }
