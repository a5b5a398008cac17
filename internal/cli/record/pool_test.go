package record

import (
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
)

// record --pool: the program runs on the pool (the fake driver sees one allocation, freed blocks wait
// for a synchronization) and every call is in the trace; a pool.json the pool inside the program does
// not implement is refused before the program runs.
func TestRecordPool(t *testing.T) {
	env := testcuda.Build(t)
	out := tempPath(t, "pooled.arrow")
	cfg := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass.json")
	code, stdout, _ := runMain(t, "-q", "--pool", cfg, "-o", out, "--shim", env.Shim, "--", env.Prog("pooled"))
	want := "reused before a sync: no\nreused after a sync: yes\nsecond free: 1\n" +
		"syncs for a full class with frees pending: 1\nreused a pending block: yes\ndriver allocation calls: 1\n"
	if code != 0 || stdout != want {
		t.Errorf("exit %d, stdout\n%s\nwant\n%s", code, stdout, want)
	}
	if events, _ := testcuda.ReadTrace(t, out); len(events) != 2059 {
		t.Errorf("trace holds %d events, want 2059", len(events))
	}
	paged := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass-paged.json")
	marker := tempPath(t, "ran")
	code, _, stderr := runMain(t, "--pool", paged, "-o", tempPath(t, "x.arrow"), "--shim", env.Shim, "--", "touch", marker)
	oneLine := "record: --pool " + paged + ": size_class.arena_paging: the pool inside the program has no paged arena; " +
		"write the config with `analyze --arena fixed --emit-config`\n"
	if code != 1 || stderr != oneLine {
		t.Errorf("paged pool.json: exit %d, stderr %q; want 1 and %q", code, stderr, oneLine)
	}
	notExist(t, marker)
}
