package outfile

import (
	"io"
	"io/fs"
	"os"
)

// file is what Write needs of the temporary file.
type file interface {
	io.Writer
	Sync() error
	Close() error
	Chmod(fs.FileMode) error
	Chown(uid, gid int) error
}

// fileSystem holds the operations Write performs on the file system; tests replace system to
// inject faults (a full disk at write or sync, a failed rename).
type fileSystem interface {
	create(name string, perm fs.FileMode) (file, error)
	rename(from, to string) error
	remove(name string) error
	syncDir(dir string) error
}

// system is the file system Write uses.
var system fileSystem = osSystem{}

// osSystem is the operating system's file system.
type osSystem struct{}

func (osSystem) create(name string, perm fs.FileMode) (file, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

func (osSystem) rename(from, to string) error { return os.Rename(from, to) }

func (osSystem) remove(name string) error { return os.Remove(name) }

// syncDir fsyncs dir, so that a rename into it survives a crash.
func (osSystem) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
