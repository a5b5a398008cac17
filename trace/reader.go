package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/allocscope/allocscope/internal/torchsnap"
)

// ReadOption configures Open.
type ReadOption func(*readConfig)

type readConfig struct {
	alloc       memory.Allocator
	skipBadRows bool
	readAhead   int
}

// WithSkipBadRows makes the RMM CSV reader skip rows it cannot parse, each reported by
// Warnings, instead of failing on the first one (the default). Other formats ignore it.
func WithSkipBadRows() ReadOption {
	return func(c *readConfig) { c.skipBadRows = true }
}

// WithReadAllocator makes the Reader take its Arrow buffers from alloc (default
// memory.DefaultAllocator).
func WithReadAllocator(alloc memory.Allocator) ReadOption {
	return func(c *readConfig) { c.alloc = alloc }
}

// WithReadAhead makes the Reader of an Arrow trace decompress and decode up to n record batches
// ahead of the one Next or NextColumns returned, each on a goroutine of its own, so that batches
// decode on other CPUs while the caller consumes one; the Reader still returns them in file order,
// and holds at most n+1 decoded batches. n = 0 decodes each batch in the call that returns it. The
// default is runtime.GOMAXPROCS(0), at most 4. Other formats ignore it.
func WithReadAhead(n int) ReadOption {
	return func(c *readConfig) { c.readAhead = max(n, 0) }
}

// Reader streams the events of a trace in batches.
//
// Open detects the format from the file's content, not its name: an allocscope Arrow IPC
// file, a PyTorch memory snapshot pickle (optionally gzip- or xz-compressed), or an RMM
// logging_resource_adaptor CSV file. Arrow files are read one record batch at a time, the next
// few decoded ahead on other goroutines (WithReadAhead), so memory does not grow with the file;
// snapshots are decoded whole (they are bounded by PyTorch's history size), CSV files are
// streamed. NextColumns hands out a batch by column, without making an Event of each row.
//
// Every error names the file and a position: `run.arrow: batch 3 row 17: ...`,
// `log.csv: line 12: ...` or `snap.pickle: byte offset 40: ...`. Batches and rows count from 0,
// lines from 1.
type Reader struct {
	name      string
	info      Info
	src       source
	snapshot  *torchsnap.Snapshot // a PyTorch snapshot's segments and settings (torchsnap.Of)
	callsites callsites           // recorded stacks, by Event.Callsite (PyTorch snapshots)
	symbols   *symbolizer         // names return addresses with Info.Modules, made at first use
	warnings  []string
	buf       []Event
	cols      transposer // NextColumns of the formats not stored by column
	err       error      // sticky error of Next and NextColumns
	closed    bool
}

// source is one trace format's decoder.
type source interface {
	// next fills buf (reusing its storage) with the next events, or returns io.EOF.
	// Errors carry the position but not the file name.
	next(buf []Event) ([]Event, error)
	// progress reports how far next has got, as done out of total units.
	progress() (done, total int64)
	close() error
}

// columnSource is a source that decodes batches by column (Arrow files).
type columnSource interface {
	// nextColumns fills c with the next batch, valid until the next call of next or nextColumns,
	// or returns io.EOF. Errors are as next's.
	nextColumns(c *Columns) error
}

// init lets torchsnap.Of hand out a Reader's snapshot: allocscope's analysis reads it, but it is
// no part of this package's API.
func init() {
	torchsnap.RegisterReader(func(reader any) *torchsnap.Snapshot {
		if r, ok := reader.(*Reader); ok {
			return r.snapshot
		}
		return nil
	})
}

// maxBatch is the number of events per Next call for formats that are not batched on disk.
const maxBatch = DefaultBatchRows

// Open opens the trace at path.
func Open(path string, opts ...ReadOption) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // "open PATH: ...": it names the file
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err // "stat PATH: ..."
	}
	r, err := newReader(path, f, st.Size(), f, opts...)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// OpenBytes reads a trace held in memory, such as one embedded in a program; name stands for the
// file in error messages. data must not change while the Reader is in use.
func OpenBytes(name string, data []byte, opts ...ReadOption) (*Reader, error) {
	return newReader(name, bytes.NewReader(data), int64(len(data)), nil, opts...)
}

// readAtSeeker is what the Arrow file reader needs.
type readAtSeeker interface {
	io.Reader
	io.ReaderAt
	io.Seeker
}

// newReader detects the format of the size bytes of in and starts the matching source.
// closer (may be nil) is closed by Reader.Close.
func newReader(name string, in readAtSeeker, size int64, closer io.Closer, opts ...ReadOption) (*Reader, error) {
	cfg := readConfig{alloc: memory.DefaultAllocator, readAhead: defaultReadAhead()}
	for _, o := range opts {
		o(&cfg)
	}
	r := &Reader{name: name}
	head := make([]byte, 64)
	n, err := in.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, err // only a file fails here, with an error that names it: "read PATH: ..."
	}
	head = head[:n]
	switch detect(head) {
	case formatArrow:
		err = r.openArrow(in, size, closer, cfg)
	case formatGzip, formatXz, formatPickle:
		err = r.openSnapshot(in, size, closer)
	case formatCSV:
		err = r.openRMM(in, size, closer, cfg)
	case formatEmpty:
		err = errors.New("empty file")
	default:
		err = fmt.Errorf("byte offset 0: unknown trace format (first bytes %q); want an allocscope Arrow file, a PyTorch memory snapshot pickle (.pickle, .gz, .xz) or an RMM log CSV", clip(head, 16))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

type format uint8

const (
	formatUnknown format = iota
	formatEmpty
	formatArrow
	formatGzip
	formatXz
	formatPickle
	formatCSV
)

var (
	arrowMagic = []byte("ARROW1")
	gzipMagic  = []byte{0x1f, 0x8b}
	xzMagic    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	rmmHeader  = []byte("Thread,") // the full header is checked by the CSV reader
)

// detect tells the format from the first bytes of a file.
func detect(head []byte) format {
	switch {
	case len(head) == 0:
		return formatEmpty
	case bytes.HasPrefix(head, arrowMagic):
		return formatArrow
	case bytes.HasPrefix(head, gzipMagic):
		return formatGzip
	case bytes.HasPrefix(head, xzMagic):
		return formatXz
	case head[0] == pickleProto:
		return formatPickle
	case bytes.HasPrefix(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), rmmHeader):
		return formatCSV
	}
	return formatUnknown
}

// Info returns the trace's metadata.
func (r *Reader) Info() Info { return r.info }

// Next returns the next batch of events, in file order (which is seq order for traces written
// by allocscope and for imported traces). The slice and its events are valid until the next
// call; Function strings stay valid. Next returns io.EOF after the last batch; other errors
// name the file and the position, and are returned again by later calls.
func (r *Reader) Next() ([]Event, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	events, err := r.src.next(r.buf[:0])
	if err != nil {
		return nil, r.fail(err)
	}
	r.buf = events
	return events, nil
}

// NextColumns returns the next batch of events column by column, in file order, as Next does: an
// Arrow trace's record batch without converting its rows to Events (the other formats' batches
// are transposed). Next and NextColumns may be mixed: each returns the batch after the last one
// either returned. The Columns are valid until the next call of either, or Close. NextColumns
// returns io.EOF after the last batch; other errors are Next's.
func (r *Reader) NextColumns() (*Columns, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if cs, ok := r.src.(columnSource); ok {
		if err := cs.nextColumns(&r.cols.cols); err != nil {
			return nil, r.fail(err)
		}
		return &r.cols.cols, nil
	}
	events, err := r.src.next(r.buf[:0])
	if err != nil {
		return nil, r.fail(err)
	}
	r.buf = events
	return r.cols.columns(events), nil
}

// usable returns the error that ends reading: the sticky error, or a read after Close.
func (r *Reader) usable() error {
	if r.err != nil {
		return r.err
	}
	if r.closed {
		return fmt.Errorf("%s: read after close", r.name)
	}
	return nil
}

// fail records err of the source, naming the file unless it is io.EOF, and returns it.
func (r *Reader) fail(err error) error {
	if err != io.EOF {
		err = fmt.Errorf("%s: %w", r.name, err)
	}
	r.err = err
	return err
}

// Progress reports how far Next has got through the trace, as done out of total in a unit
// that depends on the format (record batches, bytes or events); done == total at the end.
// Use done/total for a progress bar.
func (r *Reader) Progress() (done, total int64) {
	if r.src == nil {
		return 0, 0
	}
	return r.src.progress()
}

// Warnings returns non-fatal problems found so far (e.g. skipped snapshot entries), each
// naming the file and the position.
func (r *Reader) Warnings() []string { return r.warnings }

func (r *Reader) warnf(format string, args ...any) {
	r.warnings = append(r.warnings, r.name+": "+fmt.Sprintf(format, args...))
}

// Close releases the file and all buffers.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.buf = nil
	if err := r.src.close(); err != nil {
		return fmt.Errorf("close trace %s: %w", r.name, err)
	}
	return nil
}
