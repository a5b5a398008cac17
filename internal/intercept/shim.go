// Package intercept holds allocscope's LD_PRELOAD shim (C source in shim/, embedded; Go refuses .c
// files in a package without cgo), the code that builds and locates it, and the reader that turns
// its raw per-process logs into a trace.
//
// The shim is compiled on first use with the system C compiler into a cache directory keyed by the hash
// of its source. A recording sets EnvLogDir; every process that loads the shim then writes its events
// into its own memory-mapped raw log in that directory (format: docs/DESIGN.md), and Convert merges the
// logs in sequence order into an Arrow trace.
package intercept

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/allocscope/allocscope/internal/shimbuild"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvLogDir names the environment variable that tells the shim where to write its raw logs.
const EnvLogDir = "ALLOCSCOPE_LOG_DIR"

// ShimFileName is the name of the compiled shim inside its cache directory.
const ShimFileName = "liballocscope.so"

// shimFS holds the shim's C source: the units and headers of shim/, its build recipe shim/BUILD, and
// the C pool it links (cpool/pool.c and pool.h).
//
//go:embed shim/*.c shim/*.h shim/BUILD cpool/pool.c cpool/pool.h
var shimFS embed.FS

// shimFiles returns the shim's source files by their paths under internal/intercept/, and the paths in order.
func shimFiles() (map[string][]byte, []string) {
	files := map[string][]byte{}
	var names []string
	for _, dir := range []string{"shim", "cpool"} {
		entries, err := shimFS.ReadDir(dir)
		if err != nil {
			panic(fmt.Sprintf("intercept: embedded shim source: %v", err)) // fixed at build time
		}
		for _, e := range entries {
			name := dir + "/" + e.Name()
			b, err := shimFS.ReadFile(name)
			if err != nil {
				panic(fmt.Sprintf("intercept: embedded shim source: %v", err))
			}
			files[name] = b
			names = append(names, name)
		}
	}
	return files, names
}

// shimHash is the content hash of the shim's source files that names a compiled shim's cache directory.
func shimHash() string {
	files, names := shimFiles()
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DefaultCacheDir returns the directory where compiled shims are cached (os.UserCacheDir()/allocscope).
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find cache directory: %w", err)
	}
	return filepath.Join(dir, "allocscope"), nil
}

// EnsureShim returns the path of the compiled shim for the embedded source, compiling it with the
// system C compiler ($CC, else cc) into cacheDir/<content hash>/ when it is not there yet. Concurrent
// callers are safe: each compiles into its own temporary file and renames it into place.
func EnsureShim(cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, shimHash())
	path := filepath.Join(dir, ShimFileName)
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create shim cache %s: %w", dir, err)
	}
	if err := BuildShim(path); err != nil {
		return "", err
	}
	return path, nil
}

// BuildShim compiles the embedded shim source into the shared library out. The library appears at out
// only when complete (it is compiled to a temporary file in the same directory and renamed).
func BuildShim(out string) error {
	dir := filepath.Dir(out)
	tmp, err := os.MkdirTemp(dir, ".allocscope-build-*")
	if err != nil {
		return fmt.Errorf("build shim %s: %w", out, err)
	}
	defer os.RemoveAll(tmp)
	files, _ := shimFiles()
	for name, b := range files {
		path := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("build shim %s: %w", out, err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("build shim %s: %w", out, err)
		}
	}
	recipe, err := shimbuild.Parse(files["shim/BUILD"])
	if err != nil {
		return fmt.Errorf("build shim %s: %w", out, err)
	}
	lib := filepath.Join(tmp, ShimFileName)
	if err := compileShim(recipe.Args(tmp, lib)); err != nil {
		return fmt.Errorf("build shim %s: %w", out, err)
	}
	if err := os.Rename(lib, out); err != nil {
		return fmt.Errorf("build shim %s: %w", out, err)
	}
	return nil
}

// compileShim runs the C compiler with the recipe's arguments: $CC (which may carry flags), else cc.
func compileShim(recipeArgs []string) error {
	cc := strings.Fields(os.Getenv("CC"))
	if len(cc) == 0 {
		cc = []string{"cc"}
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return fmt.Errorf("no C compiler %q (install one, or build the shim elsewhere with `record shim -o PATH` and pass --shim PATH): %w", cc[0], err)
	}
	args := append(cc[1:len(cc):len(cc)], recipeArgs...)
	cmd := exec.Command(cc[0], args...)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// PrepareLogDir creates dir (if needed) and the control file in it, which holds the sequence
// counter every process of the recording shares and the counts of processes that loaded the shim or
// could not create their log. An existing control file is kept, so that a directory can collect
// several runs without reusing sequence numbers. The file is written, not just sized, so that a
// full disk cannot fault the processes that map it.
func PrepareLogDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create log directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, controlFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		st, serr := os.Stat(path)
		if serr != nil {
			return fmt.Errorf("check control file %s: %w", path, serr)
		}
		if st.Size() < controlFileSize {
			return fmt.Errorf("control file %s: %d bytes, want %d", path, st.Size(), controlFileSize)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create control file %s: %w", path, err)
	}
	_, err = f.Write(make([]byte, controlFileSize))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create control file %s: %w", path, err)
	}
	return nil
}
