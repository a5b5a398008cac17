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

// arrowSource reads an allocscope Arrow IPC file one record batch at a time.
type arrowSource struct {
	fr     *ipc.FileReader
	closer io.Closer
	in     io.ReaderAt
	size   int64
	blocks []arrowBlock    // record batch blocks of the footer
	cols   [numColumns]int // schema index of each layout column
	batch  int             // next batch to read
	enums  [numColumns]*stringColumn
	funcs  *stringColumn
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
	alloc := guardAllocator{Allocator: cfg.alloc, limit: maxArrowAllocation}
	var fr *ipc.FileReader
	err = catch(func() (err error) {
		fr, err = ipc.NewFileReader(in, ipc.WithAllocator(alloc))
		return err
	})
	if err != nil {
		return fmt.Errorf("byte offset %d: bad Arrow footer: %w", size-int64(len(arrowMagic)), err)
	}
	src := &arrowSource{fr: fr, closer: closer, in: in, size: size, blocks: blocks}
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
	if s.batch >= s.fr.NumRecords() {
		return nil, io.EOF
	}
	i := s.batch
	s.batch++
	if i >= len(s.blocks) {
		return nil, fmt.Errorf("batch %d: not in the footer", i)
	}
	if err := checkBlockMessage(s.in, s.size, s.blocks[i]); err != nil {
		return nil, fmt.Errorf("batch %d: %w", i, err)
	}
	var rec arrow.RecordBatch
	err := catch(func() (err error) {
		rec, err = s.fr.RecordBatchAt(i)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", i, err)
	}
	defer rec.Release()
	var out []Event
	err = catch(func() (err error) {
		out, err = s.convert(rec, buf)
		return err
	})
	var re *rowError
	switch {
	case errors.As(err, &re):
		return nil, fmt.Errorf("batch %d %w", i, err)
	case err != nil:
		return nil, fmt.Errorf("batch %d: %w", i, err)
	}
	return out, nil
}

// rowError is an error at one row of a batch.
type rowError struct {
	row int
	msg string
}

func (e *rowError) Error() string { return fmt.Sprintf("row %d: %s", e.row, e.msg) }

// convert fills buf with the rows of rec.
func (s *arrowSource) convert(rec arrow.RecordBatch, buf []Event) ([]Event, error) {
	rows := int(rec.NumRows())
	var c batchColumns
	if err := c.load(rec, s, rows); err != nil {
		return nil, err
	}
	if cap(buf) < rows {
		buf = make([]Event, rows)
	}
	buf = buf[:rows]
	funcNames := s.funcs.names
	for i := range buf {
		e := &buf[i]
		e.Seq = c.seq[i]
		e.TimeNs = c.timeNs[i]
		e.DurationNs = c.durationNs[i]
		e.PID = c.pid[i]
		e.TID = c.tid[i]
		e.Device = c.device[i]
		e.Op = Op(c.op[i])
		e.Memory = Memory(c.mem[i])
		e.Layer = Layer(c.layer[i])
		e.Function = funcNames[c.function[i]]
		e.Size = c.size[i]
		e.Address = c.address[i]
		e.Handle = c.handle[i]
		e.Stream = c.stream[i]
		e.Result = c.result[i]
		e.Callsite = c.callsite[i]
		e.Pool = c.pool != nil && c.pool[i] != 0
	}
	return buf, nil
}

// batchColumns holds the validated value slices of one record batch.
type batchColumns struct {
	seq, size, address, handle, stream, callsite []uint64
	timeNs, durationNs                           []int64
	pid, tid                                     []uint32
	device, result                               []int32
	op, mem, layer, function                     []int32
	pool                                         []uint8 // nil when the trace has no pool column
}

func (c *batchColumns) load(rec arrow.RecordBatch, s *arrowSource, rows int) error {
	var err error
	col := func(i int) arrow.Array { return rec.Column(s.cols[i]) }
	u64 := func(i int, dst *[]uint64) {
		if err == nil {
			*dst, err = primitiveValues[uint64, *array.Uint64](col(i), columnSpecs[i].name, rows, (*array.Uint64).Uint64Values)
		}
	}
	i64 := func(i int, dst *[]int64) {
		if err == nil {
			*dst, err = primitiveValues[int64, *array.Int64](col(i), columnSpecs[i].name, rows, (*array.Int64).Int64Values)
		}
	}
	u32 := func(i int, dst *[]uint32) {
		if err == nil {
			*dst, err = primitiveValues[uint32, *array.Uint32](col(i), columnSpecs[i].name, rows, (*array.Uint32).Uint32Values)
		}
	}
	i32 := func(i int, dst *[]int32) {
		if err == nil {
			*dst, err = primitiveValues[int32, *array.Int32](col(i), columnSpecs[i].name, rows, (*array.Int32).Int32Values)
		}
	}
	enum := func(i int, dst *[]int32) {
		if err == nil {
			*dst, err = s.enums[i].decode(col(i), columnSpecs[i].name, rows)
		}
	}
	u64(colSeq, &c.seq)
	i64(colTimeNs, &c.timeNs)
	i64(colDurationNs, &c.durationNs)
	u32(colPID, &c.pid)
	u32(colTID, &c.tid)
	i32(colDevice, &c.device)
	enum(colOp, &c.op)
	enum(colMemory, &c.mem)
	enum(colLayer, &c.layer)
	enum(colFunction, &c.function)
	u64(colSize, &c.size)
	u64(colAddress, &c.address)
	u64(colHandle, &c.handle)
	u64(colStream, &c.stream)
	i32(colResult, &c.result)
	u64(colCallsite, &c.callsite)
	if err == nil && s.cols[colPool] >= 0 {
		c.pool, err = primitiveValues[uint8, *array.Uint8](col(colPool), columnSpecs[colPool].name, rows, (*array.Uint8).Uint8Values)
	}
	return err
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
