// Package outfile writes the commands' output files (traces, pool.json, HTML reports, the shim
// library) so that they never hurt the machine: only a regular file, or a path where none exists
// yet, is written, and it is written atomically (a temporary file in the same directory, written,
// synced, renamed over the target, the directory synced), so that a failure leaves no partial file.
// A device, a directory, a FIFO or a socket is refused with one line naming it. A symlink to a
// regular file is written through: the link stays, and its target is replaced in the target's
// directory; a dangling symlink or one to anything else is refused.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Stdout is the path that names standard output, for the outputs that may go there.
const Stdout = "-"

// Mode is the permission of a new output file before the umask applies; a file replaced keeps its
// own.
const Mode fs.FileMode = 0o644

// tempAttempts is how many temporary names Write tries before it gives up.
const tempAttempts = 100

// Check fails, with one line naming path and what it is, when Write would refuse path: path is
// neither a regular file nor absent (a directory, a device, a FIFO, a socket), or is a dangling
// symlink or a symlink to anything but a regular file, or its directory is missing or not writable.
// It leaves no file behind and an existing one as it was.
func Check(path string) error {
	target, _, err := resolve(path)
	if err != nil {
		return err
	}
	f, tmp, err := createTemp(filepath.Dir(target), filepath.Base(target), Mode)
	if err != nil {
		return err
	}
	f.Close()
	if err := system.remove(tmp); err != nil {
		return fmt.Errorf("%s: remove the file written to check: %w", path, pathCause(err))
	}
	return nil
}

// Write writes what write produces to path, atomically: write gets a temporary file in the
// directory of path (of its target, when path is a symlink to a regular file), which is synced and
// renamed over the target, and the directory is synced. A new file gets perm less the umask; a file
// replaced keeps its mode. It refuses what Check refuses, before write runs. On any failure nothing
// is left of the temporary file and the target is as it was; an error of the file itself reads
// "write PATH: CAUSE" (CAUSE: "no space left on device", ...), one of write is returned as it is.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	target, existing, err := resolve(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(target)
	f, tmp, err := createTemp(dir, filepath.Base(target), perm)
	if err != nil {
		return err
	}
	if err := fill(f, existing, write); err != nil {
		f.Close()
		system.remove(tmp)
		return describe(path, err)
	}
	if err := f.Close(); err != nil {
		system.remove(tmp)
		return describe(path, err)
	}
	if err := system.rename(tmp, target); err != nil {
		system.remove(tmp)
		return describe(path, err)
	}
	if err := system.syncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync its directory %s: %w", path, dir, pathCause(err))
	}
	return nil
}

// fill gives the temporary file the mode (and, where allowed, the owner) of the file it replaces
// (existing, when not nil), lets write fill it and syncs it. Errors of the file are wrapped as
// fileError; a failed write fails fill even when write ignored the error.
func fill(f file, existing fs.FileInfo, write func(io.Writer) error) error {
	if existing != nil {
		if err := f.Chmod(existing.Mode().Perm()); err != nil {
			return fileError{err}
		}
		if st, ok := existing.Sys().(*syscall.Stat_t); ok {
			_ = f.Chown(int(st.Uid), int(st.Gid)) // best effort: only root may give a file away
		}
	}
	w := &recordingWriter{f: f}
	err := write(w)
	if w.err != nil { // also when write ignored it: the file is incomplete
		return fileError{w.err}
	}
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fileError{err}
	}
	return nil
}

// fileError is a failure of the output file itself (write, sync, close, rename), not of what
// produced its contents.
type fileError struct{ err error }

// Error returns the file's error message.
func (e fileError) Error() string { return e.err.Error() }

// Unwrap returns the file's error.
func (e fileError) Unwrap() error { return e.err }

// describe turns a failure of Write into its one-line error: "write PATH: CAUSE" for the file's
// own, the error of the producer as it is.
func describe(path string, err error) error {
	var fe fileError
	if errors.As(err, &fe) || isPathError(err) {
		return fmt.Errorf("write %s: %w", path, pathCause(err))
	}
	return err
}

func isPathError(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	return errors.As(err, &pe) || errors.As(err, &le)
}

// recordingWriter passes writes on to f and keeps the first error, so that Write can tell the
// file's failure from the producer's.
type recordingWriter struct {
	f   file
	err error
}

// Write writes p to the file, recording its error.
func (w *recordingWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// createTemp creates a new file ".BASE.tmp-N" in dir with perm (less the umask). Its errors name
// the directory.
func createTemp(dir, base string, perm fs.FileMode) (file, string, error) {
	for range tempAttempts {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := system.create(name, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("cannot create a file in %s: %w", dir, pathCause(err))
		}
		return f, name, nil
	}
	return nil, "", fmt.Errorf("cannot create a file in %s: %d temporary names taken", dir, tempAttempts)
}

// pathCause strips the path that an *fs.PathError or *os.LinkError repeats (a temporary name the
// user never gave), leaving "no space left on device", "permission denied", ...
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
