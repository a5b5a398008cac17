package outfile

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// writeString is a producer that writes s.
func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// checkFile fails unless path is a regular file holding want with permission mode.
func checkFile(t *testing.T, path, want string, mode fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !st.Mode().IsRegular() || st.Mode().Perm() != mode || string(data) != want {
		t.Errorf("%s: mode %v, contents %q; want a regular file of mode %v holding %q", path, st.Mode(), data, mode, want)
	}
}

// A new file gets 0644 less the umask; a file replaced keeps its mode; nothing else is left in the
// directory.
func TestWriteModes(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.json")
	if err := Write(fresh, Mode, writeString("new\n")); err != nil {
		t.Fatal(err)
	}
	checkFile(t, fresh, "new\n", 0o640)
	kept := filepath.Join(dir, "kept.json")
	if err := os.WriteFile(kept, []byte("old contents, longer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(kept, Mode, writeString("replaced\n")); err != nil {
		t.Fatal(err)
	}
	checkFile(t, kept, "replaced\n", 0o600)
	if names := dirNames(t, dir); !slices.Equal(names, []string{"fresh.json", "kept.json"}) {
		t.Errorf("directory holds %q", names)
	}
}

// A symlink to a regular file stays a link; its target is replaced in the target's directory.
func TestWriteThroughSymlink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "real.html")
	if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "report.html")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, Mode, writeString("<html>")); err != nil {
		t.Fatal(err)
	}
	if dest, err := os.Readlink(link); err != nil || dest != target {
		t.Errorf("link now %q (%v), want a link to %s", dest, err, target)
	}
	checkFile(t, target, "<html>", 0o640)
	if names := dirNames(t, elsewhere); !slices.Equal(names, []string{"real.html"}) {
		t.Errorf("target directory holds %q", names)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"report.html"}) {
		t.Errorf("link directory holds %q", names)
	}
}

// Everything but a regular file or a missing one is refused by Check and by Write, with one line
// naming it, before the producer runs.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	links := map[string]string{"dangling": filepath.Join(dir, "gone"), "todir": dir, "todev": "/dev/null"}
	for name, dest := range links {
		if err := os.Symlink(dest, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/full":                     "/dev/full is a character device, not a regular file",
		dir:                             dir + " is a directory, not a regular file",
		fifo:                            fifo + " is a FIFO, not a regular file",
		sock:                            sock + " is a socket, not a regular file",
		filepath.Join(dir, "dangling"):  filepath.Join(dir, "dangling") + " is a dangling symlink (to " + dir + "/gone), not a regular file",
		filepath.Join(dir, "todir"):     filepath.Join(dir, "todir") + " is a symlink to a directory (" + dir + "), not a regular file",
		filepath.Join(dir, "todev"):     filepath.Join(dir, "todev") + " is a symlink to a character device (/dev/null), not a regular file",
		filepath.Join(dir, "no", "out"): filepath.Join(dir, "no", "out") + ": directory " + dir + "/no: no such file or directory",
		filepath.Join(file, "out"):      filepath.Join(file, "out") + ": " + file + " is a regular file, not a directory",
		"":                              "no output path given",
	} {
		if err := Check(path); err == nil || err.Error() != want {
			t.Errorf("Check(%q) = %v, want %q", path, err, want)
		}
		ran := false
		err := Write(path, Mode, func(io.Writer) error { ran = true; return nil })
		if err == nil || err.Error() != want || ran {
			t.Errorf("Write(%q) = %v (producer ran: %v), want %q", path, err, ran, want)
		}
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"dangling", "fifo", "file", "sock", "todev", "todir"}) {
		t.Errorf("directory holds %q", names)
	}
}

// Check leaves no file behind, and an existing file as it was.
func TestCheckLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{existing, filepath.Join(dir, "fresh")} {
		if err := Check(path); err != nil {
			t.Errorf("Check(%s) = %v", path, err)
		}
	}
	checkFile(t, existing, "kept", 0o600)
	if names := dirNames(t, dir); !slices.Equal(names, []string{"existing"}) {
		t.Errorf("directory holds %q", names)
	}
}

// faultySystem is the operating system's file system with faults injected.
type faultySystem struct {
	osSystem
	writeErr, syncErr, renameErr, syncDirErr error
}

// faultyFile is an *os.File whose Write and Sync fail as its system says.
type faultyFile struct {
	*os.File
	sys *faultySystem
}

func (s *faultySystem) create(name string, perm fs.FileMode) (file, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	return faultyFile{f, s}, nil
}

func (s *faultySystem) rename(from, to string) error {
	if s.renameErr != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: s.renameErr}
	}
	return os.Rename(from, to)
}

func (s *faultySystem) syncDir(dir string) error {
	if s.syncDirErr != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: s.syncDirErr}
	}
	return s.osSystem.syncDir(dir)
}

func (f faultyFile) Write(p []byte) (int, error) {
	if f.sys.writeErr != nil {
		n, _ := f.File.Write(p[:len(p)/2]) // a partial write, as a full disk gives
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: f.sys.writeErr}
	}
	return f.File.Write(p)
}

func (f faultyFile) Sync() error {
	if f.sys.syncErr != nil {
		return &fs.PathError{Op: "sync", Path: f.Name(), Err: f.sys.syncErr}
	}
	return f.File.Sync()
}

// A full disk at write or at sync, or a failed rename, leaves the target as it was and no
// temporary file; the error is one line naming the path given. A producer's own error comes back as
// it is.
func TestFaultsLeaveNoPartialFile(t *testing.T) {
	defer func() { system = osSystem{} }()
	producerErr := errors.New("convert raw logs run.arrow.raw: truncated record")
	for _, c := range []struct {
		name string
		sys  faultySystem
		make func(io.Writer) error
		want string
	}{
		{"write", faultySystem{writeErr: syscall.ENOSPC}, writeString("new contents"), "write %s: no space left on device"},
		{"sync", faultySystem{syncErr: syscall.ENOSPC}, writeString("new contents"), "write %s: no space left on device"},
		{"rename", faultySystem{renameErr: syscall.EXDEV}, writeString("new contents"), "write %s: invalid cross-device link"},
		{"ignored write error", faultySystem{writeErr: syscall.ENOSPC},
			func(w io.Writer) error { io.WriteString(w, "new contents"); return nil }, "write %s: no space left on device"},
		{"producer", faultySystem{}, func(w io.Writer) error { io.WriteString(w, "half"); return producerErr }, producerErr.Error()},
	} {
		dir := t.TempDir()
		for _, existed := range []bool{false, true} {
			path := filepath.Join(dir, "out.json")
			if existed {
				if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			system = &c.sys
			err := Write(path, Mode, c.make)
			system = osSystem{}
			want := c.want
			if c.name != "producer" {
				want = "write " + path + c.want[len("write %s"):]
			}
			if err == nil || err.Error() != want {
				t.Errorf("%s (file existed: %v): error %v, want %q", c.name, existed, err, want)
			}
			names := dirNames(t, dir)
			if existed {
				checkFile(t, path, "old", 0o644)
				if !slices.Equal(names, []string{"out.json"}) {
					t.Errorf("%s: directory holds %q", c.name, names)
				}
			} else if len(names) != 0 {
				t.Errorf("%s: directory holds %q, want nothing", c.name, names)
			}
		}
	}
}

// A failed sync of the directory after the rename is reported; the file is complete.
func TestDirectorySyncFailure(t *testing.T) {
	defer func() { system = osSystem{} }()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	system = &faultySystem{syncDirErr: syscall.EIO}
	err := Write(path, Mode, writeString("done"))
	if want := "write " + path + ": sync its directory " + dir + ": input/output error"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	data, _ := os.ReadFile(path)
	if string(data) != "done" {
		t.Errorf("file holds %q, want done", data)
	}
}
