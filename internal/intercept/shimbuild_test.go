package intercept

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Concurrent EnsureShim calls on an empty cache build one library in cache/<hash>/ and all return it.
func TestEnsureShimConcurrent(t *testing.T) {
	cache := t.TempDir()
	paths := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = EnsureShim(cache)
		}()
	}
	wg.Wait()
	want := filepath.Join(cache, shimHash(), ShimFileName)
	for i := range paths {
		if errs[i] != nil || paths[i] != want {
			t.Fatalf("EnsureShim %d = %q, %v; want %q", i, paths[i], errs[i], want)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(want))
	if err != nil || len(entries) != 1 || entries[0].Name() != ShimFileName {
		t.Errorf("cache dir holds %v (%v), want only %s", entries, err, ShimFileName)
	}
	st, err := os.Stat(want)
	if err != nil || st.Size() == 0 {
		t.Fatalf("shim %s: %v", want, err)
	}
	// A second call finds it without compiling (no C compiler needed).
	t.Setenv("CC", "/nonexistent/cc")
	if got, err := EnsureShim(cache); err != nil || got != want {
		t.Errorf("cached EnsureShim = %q, %v", got, err)
	}
}

func TestBuildShimWithoutCompiler(t *testing.T) {
	t.Setenv("CC", "/nonexistent/cc -m64")
	out := filepath.Join(t.TempDir(), "lib.so")
	err := BuildShim(out)
	if err == nil || !strings.Contains(err.Error(), `build shim `+out+`: no C compiler "/nonexistent/cc"`) ||
		!strings.Contains(err.Error(), "--shim PATH") {
		t.Errorf("error %v", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("%s exists after a failed build", out)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 0 {
		t.Errorf("failed build left %v behind", entries)
	}
}

func TestPrepareLogDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "logs")
	if err := PrepareLogDir(dir); err != nil {
		t.Fatal(err)
	}
	seq := filepath.Join(dir, "control")
	if st, err := os.Stat(seq); err != nil || st.Size() != 4096 || st.Sys().(*syscall.Stat_t).Blocks == 0 {
		t.Fatalf("control file (written, not sparse): %v, %v", st, err)
	}
	if err := os.WriteFile(seq, append([]byte{42}, make([]byte, 4095)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PrepareLogDir(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(seq); b[0] != 42 {
		t.Errorf("PrepareLogDir reset an existing counter")
	}
	if err := os.WriteFile(seq, []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PrepareLogDir(dir); err == nil || !strings.Contains(err.Error(), "1 bytes, want 4096") {
		t.Errorf("short control file: %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	if dir, err := DefaultCacheDir(); err != nil || dir != "/tmp/xdg/allocscope" {
		t.Errorf("DefaultCacheDir = %q, %v", dir, err)
	}
}
