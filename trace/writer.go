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
// (default 2: +25% events/s over 1 on two cores, see BenchmarkWrite).
func WithCompressConcurrency(n int) WriterOption { return func(c *writerConfig) { c.compressNP = n } }

// withZstdLevel sets the zstd level (arrow-go maps 1-2 to its fastest preset, 3-5 to its
// default); for benchmarks only.
func withZstdLevel(level int) WriterOption { return func(c *writerConfig) { c.zstdLevel = level } }

// withoutCompression writes uncompressed buffers; for benchmarks only.
func withoutCompression() WriterOption { return func(c *writerConfig) { c.compression = false } }

// Writer writes events to an Arrow IPC file, DefaultBatchRows rows per zstd-compressed
// record batch. Write copies each event into column buffers without allocating; a full batch
// is encoded and compressed by a background goroutine while Write fills a second set of
// buffers. A Writer is not safe for concurrent use; Close must be called.
type Writer struct {
	cfg    writerConfig
	buf    *bufio.Writer
	file   *os.File // set by Create; closed by Close
	reuse  *reuseAllocator
	fw     *ipc.FileWriter
	schema *arrow.Schema
	dicts  [numColumns]arrow.Array // dictionaries of the string columns, nil for others

	sets        [2]*columnSet // filled alternately: one by Write, one by the encoder goroutine
	cur         int           // index in sets of the set Write fills
	columnViews               // typed views of sets[cur]

	jobs     chan batchJob // to the encoder goroutine
	results  chan error    // from the encoder goroutine, one per job
	inFlight bool          // a job was sent and its result not yet received

	n         int // rows in the current batch
	written   uint64
	funcIndex map[string]int16
	funcCache [funcCacheSize]funcCacheEntry // recently looked-up functions, at funcCacheSlot(name)
	err       error
	closed    bool
}

// funcCacheSize is the number of entries of a Writer's function cache, a power of two.
const funcCacheSize = 16

// funcCacheSlot is where name goes in the function cache: a cheap hash of its length and two of
// its bytes, which keeps the few entry points a program calls apart without hashing whole names.
func funcCacheSlot(name string) int {
	if name == "" {
		return 0
	}
	return (len(name) + 7*int(name[len(name)-1]) + 3*int(name[len(name)/2])) & (funcCacheSize - 1)
}

// funcCacheEntry is a function name and its dictionary index.
type funcCacheEntry struct {
	name  string
	index int16
}

// columnViews are typed views of the buffers of a columnSet.
type columnViews struct {
	seq, size, address, handle, stream, callsite []uint64
	timeNs, durationNs                           []int64
	pid, tid                                     []uint32
	device, result                               []int32
	op, mem, layer                               []int8
	function                                     []int16
	pool                                         []uint8
}

// columnSet is one buffer per column for a full batch, reused for every batch.
type columnSet struct {
	cols  [numColumns]*memory.Buffer
	views columnViews
}

type batchJob struct {
	set  *columnSet
	rows int
}

// NewWriter starts an Arrow IPC file on w. The caller closes w after Close. It fails when one of
// info's opaque values (Info.Pool, FrameworkCapture.OOM) is not a JSON object.
func NewWriter(w io.Writer, info Info, opts ...WriterOption) (*Writer, error) {
	cfg := writerConfig{alloc: memory.DefaultAllocator, batchRows: DefaultBatchRows, compressNP: 2,
		compression: true, zstdLevel: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.batchRows <= 0 {
		return nil, fmt.Errorf("trace writer: batch rows must be positive, got %d", cfg.batchRows)
	}
	if err := info.check(); err != nil {
		return nil, fmt.Errorf("trace writer: info: %w", err)
	}
	tw := &Writer{cfg: cfg, buf: bufio.NewWriterSize(w, 1<<20), schema: schemaFor(info)}
	if err := tw.buildFunctionIndex(); err != nil {
		return nil, err
	}
	tw.reuse = newReuseAllocator(cfg.alloc)
	ipcOpts := []ipc.Option{ipc.WithSchema(tw.schema), ipc.WithAllocator(tw.reuse)}
	if cfg.compression {
		ipcOpts = append(ipcOpts, ipc.WithZstdLevel(cfg.zstdLevel), ipc.WithCompressConcurrency(cfg.compressNP))
	}
	fw, err := ipc.NewFileWriter(tw.buf, ipcOpts...)
	if err != nil {
		return nil, fmt.Errorf("trace writer: %w", err)
	}
	tw.fw = fw
	tw.buildDictionaries()
	for i := range tw.sets {
		tw.sets[i] = newColumnSet(cfg.alloc, cfg.batchRows)
	}
	tw.columnViews = tw.sets[0].views
	tw.jobs = make(chan batchJob)
	tw.results = make(chan error, 1)
	go tw.encode()
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
	for i := range w.funcCache {
		w.funcCache[i] = funcCacheEntry{"", w.funcIndex[""]}
	}
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

// newColumnSet allocates one buffer per column for rows rows and sets the typed views.
func newColumnSet(alloc memory.Allocator, rows int) *columnSet {
	s := &columnSet{}
	for i, c := range columnSpecs {
		width := 0
		switch t := c.typ.(type) {
		case *arrow.DictionaryType:
			width = t.IndexType.(arrow.FixedWidthDataType).Bytes()
		case arrow.FixedWidthDataType:
			width = t.Bytes()
		}
		b := memory.NewResizableBuffer(alloc)
		b.Resize(rows * width)
		s.cols[i] = b
	}
	v := &s.views
	v.seq = arrow.Uint64Traits.CastFromBytes(s.cols[colSeq].Bytes())[:rows]
	v.timeNs = arrow.Int64Traits.CastFromBytes(s.cols[colTimeNs].Bytes())[:rows]
	v.durationNs = arrow.Int64Traits.CastFromBytes(s.cols[colDurationNs].Bytes())[:rows]
	v.pid = arrow.Uint32Traits.CastFromBytes(s.cols[colPID].Bytes())[:rows]
	v.tid = arrow.Uint32Traits.CastFromBytes(s.cols[colTID].Bytes())[:rows]
	v.device = arrow.Int32Traits.CastFromBytes(s.cols[colDevice].Bytes())[:rows]
	v.op = arrow.Int8Traits.CastFromBytes(s.cols[colOp].Bytes())[:rows]
	v.mem = arrow.Int8Traits.CastFromBytes(s.cols[colMemory].Bytes())[:rows]
	v.layer = arrow.Int8Traits.CastFromBytes(s.cols[colLayer].Bytes())[:rows]
	v.function = arrow.Int16Traits.CastFromBytes(s.cols[colFunction].Bytes())[:rows]
	v.size = arrow.Uint64Traits.CastFromBytes(s.cols[colSize].Bytes())[:rows]
	v.address = arrow.Uint64Traits.CastFromBytes(s.cols[colAddress].Bytes())[:rows]
	v.handle = arrow.Uint64Traits.CastFromBytes(s.cols[colHandle].Bytes())[:rows]
	v.stream = arrow.Uint64Traits.CastFromBytes(s.cols[colStream].Bytes())[:rows]
	v.result = arrow.Int32Traits.CastFromBytes(s.cols[colResult].Bytes())[:rows]
	v.callsite = arrow.Uint64Traits.CastFromBytes(s.cols[colCallsite].Bytes())[:rows]
	v.pool = arrow.Uint8Traits.CastFromBytes(s.cols[colPool].Bytes())[:rows]
	return s
}

func (s *columnSet) release() {
	for _, b := range s.cols {
		b.Release()
	}
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
	w.pool[i] = 0
	if e.Pool {
		w.pool[i] = 1
	}
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
	slot := &w.funcCache[funcCacheSlot(e.Function)]
	if e.Function == slot.name {
		return slot.index, nil
	}
	fi, ok := w.funcIndex[e.Function]
	if !ok {
		return 0, fmt.Errorf("trace writer: event seq %d: function %q is not in the writer's dictionary (add it with trace.WithFunctions)", e.Seq, e.Function)
	}
	*slot = funcCacheEntry{e.Function, fi}
	return fi, nil
}

// flush hands the rows collected so far to the encoder goroutine and switches Write to the
// other column set, after waiting for that set's previous batch to be written.
func (w *Writer) flush() error {
	if w.n == 0 {
		return nil
	}
	if err := w.wait(); err != nil {
		return err
	}
	w.jobs <- batchJob{w.sets[w.cur], w.n}
	w.inFlight = true
	w.written += uint64(w.n)
	w.n = 0
	w.cur = 1 - w.cur
	w.columnViews = w.sets[w.cur].views
	return nil
}

// wait waits for the batch in flight, if any, and returns its error.
func (w *Writer) wait() error {
	if !w.inFlight {
		return nil
	}
	w.inFlight = false
	if err := <-w.results; err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// encode runs in its own goroutine: it writes each batch it is sent to the IPC file.
func (w *Writer) encode() {
	batch := 0
	for job := range w.jobs {
		err := w.writeBatch(job.set, job.rows)
		if err != nil {
			err = fmt.Errorf("trace writer: batch %d: %w", batch, err)
		}
		batch++
		w.results <- err
	}
}

// writeBatch encodes rows rows of set as one record batch.
func (w *Writer) writeBatch(set *columnSet, rows int) error {
	cols := make([]arrow.Array, numColumns)
	for i, c := range columnSpecs {
		bufs := []*memory.Buffer{nil, set.cols[i]}
		var data *array.Data
		if d := w.dicts[i]; d != nil {
			data = array.NewDataWithDictionary(c.typ, rows, bufs, 0, 0, d.Data().(*array.Data))
		} else {
			data = array.NewData(c.typ, rows, bufs, nil, 0, 0)
		}
		cols[i] = array.MakeFromData(data)
		data.Release()
	}
	rec := array.NewRecordBatch(w.schema, cols, int64(rows))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	return w.fw.Write(rec)
}

// Close writes the last batch and the file footer, releases all buffers, and closes the
// file if the Writer was made by Create. It returns the first error of any batch.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	err := w.flush()
	if werr := w.wait(); err == nil {
		err = werr
	}
	close(w.jobs)
	w.closed = true
	if cerr := w.fw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("trace writer: %w", cerr)
	}
	if ferr := w.buf.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("trace writer: %w", ferr)
	}
	for _, s := range w.sets {
		s.release()
	}
	for _, d := range w.dicts {
		if d != nil {
			d.Release()
		}
	}
	w.reuse.release()
	if w.file != nil {
		if cerr := w.file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("trace writer: %w", cerr)
		}
	}
	return err
}

// Count returns the number of events written so far, including those not yet flushed.
func (w *Writer) Count() uint64 { return w.written + uint64(w.n) }
