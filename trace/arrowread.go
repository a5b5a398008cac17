package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// maxArrowAllocation bounds one buffer allocation while reading an Arrow file, so that a
// corrupt length field (a compressed buffer's uncompressed size, say) gives an error instead
// of exhausting memory. A 65536-row batch needs 512 KiB per column; 256 MiB fits batches of
// 32 Mi rows.
const maxArrowAllocation = 256 << 20

// guardAllocator refuses allocations above limit by panicking with errAllocationTooLarge;
// the reader recovers and reports it with the position.
type guardAllocator struct {
	memory.Allocator
	limit int
}

type errAllocationTooLarge int

func (e errAllocationTooLarge) Error() string {
	return fmt.Sprintf("buffer of %d bytes exceeds the reader's limit (corrupt length field?)", int(e))
}

func (g guardAllocator) Allocate(n int) []byte {
	if n < 0 || n > g.limit {
		panic(errAllocationTooLarge(n))
	}
	return g.Allocator.Allocate(n)
}

func (g guardAllocator) Reallocate(n int, b []byte) []byte {
	if n < 0 || n > g.limit {
		panic(errAllocationTooLarge(n))
	}
	return g.Allocator.Reallocate(n, b)
}

// catch runs f and turns a panic inside it (arrow-go panics on some corrupt inputs) into an error.
func catch(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(error); ok {
				err = fmt.Errorf("corrupt data: %w", e)
			} else {
				err = fmt.Errorf("corrupt data: %v", p)
			}
		}
	}()
	return f()
}

// arrowSource reads an allocscope Arrow IPC file one record batch at a time; a readAhead
// decodes the record batches after the current one on other goroutines.
type arrowSource struct {
	fr         *ipc.FileReader
	closer     io.Closer
	in         io.ReaderAt
	size       int64
	blocks     []arrowBlock    // record batch blocks of the footer
	cols       [numColumns]int // schema index of each layout column
	batch      int             // next batch to read
	enums      [numColumns]*stringColumn
	funcs      *stringColumn
	ahead      readAhead
	cur        arrow.RecordBatch // the batch the last Columns point into
	enumValues                   // storage of the decoded enum columns
	events     Columns           // the columns next converts to events
}

// enumValues holds the enum columns of a batch, narrowed from their codes.
type enumValues struct {
	ops    []Op
	mems   []Memory
	layers []Layer
}

func (r *Reader) openArrow(in readAtSeeker, size int64, closer io.Closer, cfg readConfig) error {
	if err := checkArrowEnds(in, size); err != nil {
		return err
	}
	footer, err := readFooter(in, size)
	if err != nil {
		return err
	}
	dicts, blocks := footerBlocks(footer)
	for i, blk := range dicts {
		if err := checkBlockMessage(in, size, blk); err != nil {
			return fmt.Errorf("dictionary %d: %w", i, err)
		}
	}
	open := func() (fr *ipc.FileReader, err error) {
		err = catch(func() (err error) {
			alloc := guardAllocator{Allocator: cfg.alloc, limit: maxArrowAllocation}
			fr, err = ipc.NewFileReader(in, ipc.WithAllocator(alloc), ipc.WithFooterOffset(size))
			return err
		})
		return fr, err
	}
	fr, err := open()
	if err != nil {
		return fmt.Errorf("byte offset %d: bad Arrow footer: %w", size-int64(len(arrowMagic)), err)
	}
	src := &arrowSource{fr: fr, closer: closer, in: in, size: size, blocks: blocks}
	src.ahead = readAhead{fetch: src.fetch, open: open, main: fr, n: fr.NumRecords(), depth: cfg.readAhead}
	if err := src.checkSchema(r); err != nil {
		fr.Close()
		return fmt.Errorf("schema: %w", err)
	}
	r.src = src
	return nil
}

// checkArrowEnds checks the magic at both ends, so a truncated file gets a plain message.
func checkArrowEnds(in io.ReaderAt, size int64) error {
	const minSize = 2*8 + 4 // padded leading magic, footer length, trailing magic
	if size < minSize {
		return fmt.Errorf("byte offset %d: Arrow file truncated (%d bytes)", size, size)
	}
	tail := make([]byte, len(arrowMagic))
	if _, err := in.ReadAt(tail, size-int64(len(tail))); err != nil {
		return fmt.Errorf("byte offset %d: %w", size-int64(len(tail)), err)
	}
	if !bytes.Equal(tail, arrowMagic) {
		return fmt.Errorf("byte offset %d: no Arrow end marker: file truncated or not closed by its writer", size)
	}
	return nil
}

func (s *arrowSource) checkSchema(r *Reader) error {
	schema := s.fr.Schema()
	info, err := infoFromMetadata(schema.Metadata())
	if err != nil {
		return err
	}
	if s.cols, err = resolveColumns(schema); err != nil {
		return err
	}
	r.info = info
	s.enums[colOp] = newEnumColumn(func(v string) (int32, error) { o, err := ParseOp(v); return int32(o), err })
	s.enums[colMemory] = newEnumColumn(func(v string) (int32, error) { m, err := ParseMemory(v); return int32(m), err })
	s.enums[colLayer] = newEnumColumn(func(v string) (int32, error) { l, err := ParseLayer(v); return int32(l), err })
	s.funcs = newFunctionColumn()
	s.enums[colFunction] = s.funcs
	return nil
}

func (s *arrowSource) progress() (done, total int64) {
	return int64(s.batch), int64(len(s.blocks))
}

func (s *arrowSource) close() error {
	s.ahead.stop()
	s.release()
	for _, c := range s.enums {
		if c != nil {
			c.release()
		}
	}
	err := s.fr.Close()
	if s.closer != nil {
		if cerr := s.closer.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (s *arrowSource) next(buf []Event) ([]Event, error) {
	if err := s.nextColumns(&s.events); err != nil {
		return nil, err
	}
	return fillEvents(&s.events, buf), nil
}

// release releases the batch the last Columns point into.
func (s *arrowSource) release() {
	if s.cur != nil {
		s.cur.Release()
		s.cur = nil
	}
}

// nextColumns fills c with the columns of the next batch, or returns io.EOF.
func (s *arrowSource) nextColumns(c *Columns) error {
	s.release()
	if s.batch >= s.ahead.n {
		return io.EOF
	}
	i := s.batch
	s.batch++
	rec, err := s.ahead.get(i)
	if err != nil {
		return err
	}
	s.cur = rec
	err = catch(func() error { return s.load(rec, c) })
	var re *rowError
	switch {
	case errors.As(err, &re):
		return fmt.Errorf("batch %d %w", i, err)
	case err != nil:
		return fmt.Errorf("batch %d: %w", i, err)
	}
	return nil
}

// fetch reads and decodes batch i with fr (on any goroutine: it reads only what Open set up, and fr
// is used by one goroutine at a time).
func (s *arrowSource) fetch(fr *ipc.FileReader, i int) (rec arrow.RecordBatch, err error) {
	if i >= len(s.blocks) {
		return nil, fmt.Errorf("batch %d: not in the footer", i)
	}
	err = catch(func() error {
		if err := checkBlockMessage(s.in, s.size, s.blocks[i]); err != nil {
			return err
		}
		rec, err = fr.RecordBatchAt(i)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", i, err)
	}
	return rec, nil
}

// rowError is an error at one row of a batch.
type rowError struct {
	row int
	msg string
}

func (e *rowError) Error() string { return fmt.Sprintf("row %d: %s", e.row, e.msg) }

// load points c at the columns of rec, decoding the string columns.
func (s *arrowSource) load(rec arrow.RecordBatch, c *Columns) error {
	l := columnLoader{rec: rec, cols: &s.cols, rows: int(rec.NumRows())}
	loadValues(&l, colSeq, &c.Seq, (*array.Uint64).Uint64Values)
	loadValues(&l, colTimeNs, &c.TimeNs, (*array.Int64).Int64Values)
	loadValues(&l, colDurationNs, &c.DurationNs, (*array.Int64).Int64Values)
	loadValues(&l, colPID, &c.PID, (*array.Uint32).Uint32Values)
	loadValues(&l, colTID, &c.TID, (*array.Uint32).Uint32Values)
	loadValues(&l, colDevice, &c.Device, (*array.Int32).Int32Values)
	s.ops = loadEnum(&l, s.enums[colOp], colOp, s.ops)
	s.mems = loadEnum(&l, s.enums[colMemory], colMemory, s.mems)
	s.layers = loadEnum(&l, s.enums[colLayer], colLayer, s.layers)
	c.Function = l.codes(s.funcs, colFunction)
	loadValues(&l, colSize, &c.Size, (*array.Uint64).Uint64Values)
	loadValues(&l, colAddress, &c.Address, (*array.Uint64).Uint64Values)
	loadValues(&l, colHandle, &c.Handle, (*array.Uint64).Uint64Values)
	loadValues(&l, colStream, &c.Stream, (*array.Uint64).Uint64Values)
	loadValues(&l, colResult, &c.Result, (*array.Int32).Int32Values)
	loadValues(&l, colCallsite, &c.Callsite, (*array.Uint64).Uint64Values)
	c.Pool = nil
	if s.cols[colPool] >= 0 {
		loadValues(&l, colPool, &c.Pool, (*array.Uint8).Uint8Values)
	}
	if l.err != nil {
		return l.err
	}
	c.Op, c.Memory, c.Layer = s.ops, s.mems, s.layers
	c.Functions, c.rows = s.funcs.names, l.rows
	return nil
}

// columnLoader reads the columns of one record batch; after the first error it reads no more.
type columnLoader struct {
	rec  arrow.RecordBatch
	cols *[numColumns]int // schema index of each layout column
	rows int
	err  error
}

func (l *columnLoader) col(i int) arrow.Array { return l.rec.Column(l.cols[i]) }

// codes returns the codes of string column i, decoded by sc.
func (l *columnLoader) codes(sc *stringColumn, i int) []int32 {
	if l.err != nil {
		return nil
	}
	var codes []int32
	codes, l.err = sc.decode(l.col(i), columnSpecs[i].name, l.rows)
	return codes
}

// loadValues sets *dst to the values of the primitive column i.
func loadValues[T any, A arrow.Array](l *columnLoader, i int, dst *[]T, values func(A) []T) {
	if l.err == nil {
		*dst, l.err = primitiveValues(l.col(i), columnSpecs[i].name, l.rows, values)
	}
}

// loadEnum returns the values of the enum column i (op, memory or layer), decoded by sc, in buf's
// storage.
func loadEnum[T ~uint8](l *columnLoader, sc *stringColumn, i int, buf []T) []T {
	codes := l.codes(sc, i)
	buf = resize(buf, len(codes))
	for j, code := range codes {
		buf[j] = T(code) // the parser admits only the enum's values
	}
	return buf
}

// primitiveValues returns the values of a non-null primitive column of rows rows.
func primitiveValues[T any, A arrow.Array](arr arrow.Array, name string, rows int, values func(A) []T) ([]T, error) {
	a, ok := arr.(A)
	if !ok {
		return nil, fmt.Errorf("column %q has type %s", name, arr.DataType())
	}
	if err := checkShape(arr, name, rows); err != nil {
		return nil, err
	}
	v := values(a)
	if len(v) < rows {
		return nil, fmt.Errorf("column %q holds %d values for %d rows", name, len(v), rows)
	}
	return v[:rows], nil
}

// checkShape checks that arr has rows values and no nulls.
func checkShape(arr arrow.Array, name string, rows int) error {
	if arr.Len() != rows {
		return fmt.Errorf("column %q has %d rows, the batch %d", name, arr.Len(), rows)
	}
	if arr.NullN() > 0 {
		for i := 0; i < rows; i++ {
			if arr.IsNull(i) {
				return &rowError{i, fmt.Sprintf("column %q: null value", name)}
			}
		}
	}
	return nil
}
