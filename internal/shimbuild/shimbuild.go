// Package shimbuild reads the build recipe of allocscope's LD_PRELOAD shim (internal/intercept/shim/BUILD):
// its compilation units, include directories, compiler flags and libraries. intercept.BuildShim
// compiles the embedded source with it, and internal/testcuda the checkout's, so both build the
// same library the same way.
package shimbuild

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
)

// Recipe is the shim's build: paths relative to the intercept directory.
type Recipe struct {
	Sources []string // the compilation units, in order
	Include []string // the include directories
	Flags   []string // the compiler's flags
	Libs    []string // the libraries to link
}

// Parse reads a recipe: one key per line (sources, include, flags, libs) followed by its words;
// blank lines and lines starting with # are skipped.
func Parse(b []byte) (Recipe, error) {
	var r Recipe
	fields := map[string]*[]string{"sources": &r.Sources, "include": &r.Include, "flags": &r.Flags, "libs": &r.Libs}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		words := strings.Fields(sc.Text())
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		f, ok := fields[words[0]]
		if !ok {
			return Recipe{}, fmt.Errorf("shim build recipe, line %d: unknown key %q", n, words[0])
		}
		*f = append(*f, words[1:]...)
	}
	if len(r.Sources) == 0 {
		return Recipe{}, fmt.Errorf("shim build recipe: no sources")
	}
	return r, nil
}

// Args returns the compiler's arguments that build the shim from the units under root (the
// intercept directory, or a copy of its shim files) into out.
func (r Recipe) Args(root, out string) []string {
	var args []string
	for _, dir := range r.Include {
		args = append(args, "-I", filepath.Join(root, dir))
	}
	args = append(args, r.Flags...)
	args = append(args, "-o", out)
	for _, src := range r.Sources {
		args = append(args, filepath.Join(root, src))
	}
	return append(args, r.Libs...)
}
