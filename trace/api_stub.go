package trace

// This file holds the public signatures that other packages code against while the Arrow
// implementation is written. The trace owner replaces it with the real implementation.

import (
	"errors"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// FormatVersion is the version of the Arrow trace layout this package writes.
const FormatVersion = 1

// Info is the metadata of a trace, stored in the Arrow schema's metadata.
type Info struct {
	FormatVersion   int       // layout version of the file
	Source          string    // "allocscope", "pytorch-snapshot" or "rmm-csv"
	Command         []string  // command line of the recorded program
	Host            string    // host name
	StartTime       time.Time // wall-clock start of the recording
	RecorderVersion string    // allocscope version that wrote the file
	DriverVersion   string    // CUDA driver version, when known
	GPUNames        []string  // GPU names by ordinal, when known
}

var errNotImplemented = errors.New("not implemented yet")

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	alloc     memory.Allocator
	batchRows int
}

// WithAllocator makes the Writer take its Arrow buffers from alloc.
func WithAllocator(alloc memory.Allocator) WriterOption {
	return func(c *writerConfig) { c.alloc = alloc }
}

// WithBatchRows sets the number of rows per record batch (default 65536).
func WithBatchRows(n int) WriterOption { return func(c *writerConfig) { c.batchRows = n } }

// Writer writes events to an Arrow IPC file.
type Writer struct{}

// NewWriter starts an Arrow IPC file on w.
func NewWriter(w io.Writer, info Info, opts ...WriterOption) (*Writer, error) {
	return nil, errNotImplemented
}

// Create creates the file at path and starts a Writer on it; Close closes the file.
func Create(path string, info Info, opts ...WriterOption) (*Writer, error) {
	return nil, errNotImplemented
}

// Write appends one event.
func (w *Writer) Write(e *Event) error { return errNotImplemented }

// Close flushes the last batch and the file footer.
func (w *Writer) Close() error { return errNotImplemented }

// ReadOption configures Open.
type ReadOption func(*readConfig)

type readConfig struct {
	alloc memory.Allocator
}

// WithReadAllocator makes the Reader take its Arrow buffers from alloc.
func WithReadAllocator(alloc memory.Allocator) ReadOption {
	return func(c *readConfig) { c.alloc = alloc }
}

// Reader streams the events of a trace in batches. Open detects the format: allocscope Arrow IPC,
// PyTorch memory snapshot pickle (optionally .gz or .xz), RMM logging CSV.
type Reader struct{}

// Open opens the trace at path.
func Open(path string, opts ...ReadOption) (*Reader, error) { return nil, errNotImplemented }

// Info returns the trace's metadata.
func (r *Reader) Info() Info { return Info{} }

// Next returns the next batch of events, in seq order. The slice is valid until the next call.
// It returns io.EOF after the last batch; other errors name the file and the position.
func (r *Reader) Next() ([]Event, error) { return nil, io.EOF }

// Warnings returns non-fatal problems found so far (e.g. skipped rows).
func (r *Reader) Warnings() []string { return nil }

// Close releases the file and all buffers.
func (r *Reader) Close() error { return nil }
