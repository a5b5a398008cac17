package importgraph

import (
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/allocscope/allocscope"

// floors lists the module's directories from the bottom floor up: a package is on the floor of the
// longest prefix that names its directory, and may import packages of its own floor and below.
var floors = [][]string{
	{"internal/units", "internal/version", "internal/outfile", "internal/progress", "internal/shimbuild",
		"internal/addrindex", "internal/slots", "internal/importgraph", "internal/spans", "internal/upstreams",
		"internal/poolsim", "internal/buildid", "internal/torchsnap", "internal/poolactivity"},
	{"trace", "pool"}, // the public packages
	{"internal/requests", "internal/tracetest", "internal/testcuda", "internal/poolmeter", "internal/torchhist"},
	{"internal/analysis", "internal/replay", "internal/intercept"},
	{"internal/cli"},
	{"cmd"},
}

// floorOf returns the floor of the package in dir (relative to the module root, slash-separated),
// or -1 when no entry of floors names it.
func floorOf(dir string) int {
	best, floor := -1, -1
	for f, prefixes := range floors {
		for _, p := range prefixes {
			if (dir == p || strings.HasPrefix(dir, p+"/")) && len(p) > best {
				best, floor = len(p), f
			}
		}
	}
	return floor
}

// TestNoImportRunsUp reads the imports of every package of the module (its non-test files, for
// this platform, with the cuda build tag; files tagged ignore are no part of the build) and fails
// for each package that is on no floor and for each import of a package on a higher floor.
func TestNoImportRunsUp(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := build.Default
	ctx.BuildTags = append(ctx.BuildTags, "cuda")
	imports := map[string][]string{} // package dir → module dirs it imports
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || name == "bin") {
			return filepath.SkipDir
		}
		pkg, err := ctx.ImportDir(path, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, p := range pkg.Imports {
			if dep, ok := strings.CutPrefix(p, module+"/"); ok {
				imports[filepath.ToSlash(rel)] = append(imports[filepath.ToSlash(rel)], dep)
			}
		}
		if _, ok := imports[filepath.ToSlash(rel)]; !ok {
			imports[filepath.ToSlash(rel)] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 20 {
		t.Fatalf("%d packages found under %s: not the module root?", len(imports), root)
	}
	for _, dir := range slices.Sorted(maps.Keys(imports)) {
		f := floorOf(dir)
		if f < 0 {
			t.Errorf("package %s is on no floor: add it to floors", dir)
			continue
		}
		for _, imp := range imports[dir] {
			if g := floorOf(imp); g > f {
				t.Errorf("%s (floor %d) imports %s (floor %d): an import that runs up", dir, f, imp, g)
			}
		}
	}
}
