package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// resolve returns the file that writing path replaces: path itself, or the regular file a symlink
// at path leads to, with its FileInfo (nil when there is no file yet). It refuses anything else with
// one line naming path and what it is.
func resolve(path string) (target string, existing fs.FileInfo, err error) {
	if path == "" {
		return "", nil, errors.New("no output path given")
	}
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return path, nil, checkDir(path)
	case err != nil:
		return "", nil, fmt.Errorf("%s: %w", path, pathCause(err))
	case st.Mode().IsRegular():
		return path, st, nil
	case st.Mode()&fs.ModeSymlink == 0:
		return "", nil, fmt.Errorf("%s is %s, not a regular file", path, kind(st.Mode()))
	}
	return resolveLink(path)
}

// resolveLink follows the symlink at path to a regular file, and refuses a dangling one or one to
// anything else.
func resolveLink(path string) (string, fs.FileInfo, error) {
	dest, _ := os.Readlink(path)
	target, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("%s is a dangling symlink (to %s), not a regular file", path, dest)
	}
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, pathCause(err))
	}
	st, err := os.Stat(target)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, pathCause(err))
	}
	if !st.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s is a symlink to %s (%s), not a regular file", path, kind(st.Mode()), target)
	}
	return target, st, nil
}

// checkDir fails when the directory that would hold the new file path is missing or not a
// directory.
func checkDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: directory %s: %w", path, dir, pathCause(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is %s, not a directory", path, dir, kind(st.Mode()))
	}
	return nil
}

// kind names the type of a file that is not a regular one, with its article: "a directory",
// "a character device", ...
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsRegular():
		return "a regular file"
	}
	return "not a regular file (" + m.Type().String() + ")"
}
