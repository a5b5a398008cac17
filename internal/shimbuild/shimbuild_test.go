package shimbuild

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The checked-in recipe names every unit of the shim, the C pool, hidden visibility and the
// libraries, and turns into these exact compiler arguments.
func TestParseTheRecipe(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "intercept", "shim", "BUILD"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-I", "/i/shim", "-I", "/i/cpool", "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", "/o/lib.so",
		"/i/shim/shim.c", "/i/shim/hooks.c", "/i/shim/resolve.c", "/i/shim/log.c", "/i/shim/clock.c", "/i/shim/addrmap.c",
		"/i/shim/contexts.c", "/i/shim/serve.c", "/i/cpool/pool.c", "-ldl", "-lpthread"}
	if got := r.Args("/i", "/o/lib.so"); !slices.Equal(got, want) {
		t.Errorf("args\n%q\nwant\n%q", got, want)
	}
	units, _ := filepath.Glob(filepath.Join("..", "intercept", "shim", "*.c"))
	if len(units) != len(r.Sources)-1 {
		t.Errorf("%d units in internal/intercept/shim, the recipe names %d of them and the C pool", len(units), len(r.Sources)-1)
	}
}

// A recipe with an unknown key, or without sources, is refused with one line.
func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"sources a.c\nfoo bar\n": `shim build recipe, line 2: unknown key "foo"`,
		"# nothing\nflags -O2\n": "shim build recipe: no sources",
	} {
		if _, err := Parse([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("Parse(%q): %v, want %s", in, err, want)
		}
	}
}
