// Package intercept holds allocscope's LD_PRELOAD shim (C source, embedded), the code that builds and
// locates it, and the reader that turns its raw per-process logs into a trace.
package intercept

// This file holds the public signatures that cmd/record codes against while the shim is written.
// The intercept owner replaces it with the real implementation.

import (
	"errors"

	"github.com/allocscope/allocscope/trace"
)

// EnvLogDir names the environment variable that tells the shim where to write its raw logs.
const EnvLogDir = "ALLOCSCOPE_LOG_DIR"

var errNotImplemented = errors.New("not implemented yet")

// DefaultCacheDir returns the directory where compiled shims are cached (os.UserCacheDir()/allocscope).
func DefaultCacheDir() (string, error) { return "", errNotImplemented }

// EnsureShim returns the path of the compiled shim for the embedded source, compiling it with the
// system C compiler ($CC, else cc) into cacheDir/<content hash>/ when it is not there yet.
func EnsureShim(cacheDir string) (string, error) { return "", errNotImplemented }

// BuildShim compiles the embedded shim source into the shared library out.
func BuildShim(out string) error { return errNotImplemented }

// PrepareLogDir creates dir (if needed) and the shared sequence-counter file in it.
func PrepareLogDir(dir string) error { return errNotImplemented }

// ConvertOptions tunes Convert.
type ConvertOptions struct {
	// Progress, when set, is called now and then with events done and the total expected.
	Progress func(done, total int64)
}

// Summary describes what Convert wrote.
type Summary struct {
	Events        int64    // events written
	Processes     int      // raw logs (processes) read
	Devices       []int32  // device ordinals seen, ascending
	PeakLiveBytes uint64   // peak of live device bytes (allocations minus frees), all processes together
	AllocCallNs   int64    // total time spent inside intercepted calls, ns
	Warnings      []string // non-fatal problems (uncommitted records skipped, ...)
}

// Convert merges the raw logs in dir, in seq order, into w. It does not close w.
func Convert(dir string, w *trace.Writer, opts ConvertOptions) (Summary, error) {
	return Summary{}, errNotImplemented
}

// Command returns the command line recorded in the raw logs of dir (of the first process), for the trace metadata.
func Command(dir string) ([]string, error) { return nil, errNotImplemented }
