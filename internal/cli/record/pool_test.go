package record

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/trace"
)

// record --pool: the program runs on the pool (the fake driver sees one allocation, freed blocks wait
// for a synchronization) and every call is in the trace; a pool.json the pool inside the program does
// not implement is refused before the program runs.
func TestRecordPool(t *testing.T) {
	env := testcuda.Build(t)
	out := tempPath(t, "pooled.arrow")
	cfg := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass.json")
	code, stdout, stderr := runMain(t, "-q", "--pool", cfg, "-o", out, "--shim", env.Shim, "--", env.Prog("pooled"))
	want := "reused before a sync: no\nreused after a sync: yes\nsecond free: 1\n" +
		"a full class with frees pending: syncs 0, barriers 1\nreused a pending block: yes\nexported a pool block: 0\n" +
		"driver allocation calls: 1\n"
	wantErr := "allocscope: the program exported a block of record --pool's pool with cudaIpcGetMemHandle; " +
		"a process that opens the handle sees the pool's region, not the block: record this program without --pool\n" +
		"allocscope: warning: the program exported 1 pool block(s) with cudaIpcGetMemHandle; a process that opens " +
		"such a handle sees the pool's region, not the block: record it without --pool\n"
	if code != 0 || stdout != want || stderr != wantErr {
		t.Errorf("exit %d, stdout\n%s\nstderr\n%s\nwant\n%s\n%s", code, stdout, stderr, want, wantErr)
	}
	events, info := testcuda.ReadTrace(t, out)
	if len(events) != 2059 {
		t.Errorf("trace holds %d events, want 2059", len(events))
	}
	// One reservation (the plan), no growth, nothing passed to CUDA, one ordering of its own (the
	// class full of pending blocks: a barrier, as the program made no non-blocking stream), one export.
	const plan = 512*1024 + 4096*256 + 65536*64 + 1048576*16 + 256<<20 // sizeclass.json's classes and arena
	p := info.Pool
	if p == nil {
		t.Fatal("trace has no pool activity")
	}
	if p.Reservations != 1 || p.Fallbacks != 0 || p.PassedThrough != 0 || p.Syncs != 1 || p.Barriers != 1 ||
		p.StreamsApart != 0 || p.SyncNs <= 0 ||
		p.Events != 0 || p.StreamWaits != 0 || p.HostWaits != 0 || p.IPCExports != 1 ||
		p.PeakReservedBytes != plan {
		t.Errorf("pool activity %+v; want 1 reservation of %d bytes, 1 sync (a barrier), 1 export, nothing else", *p, plan)
	}
	paged := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass-paged.json")
	marker := tempPath(t, "ran")
	code, _, stderr = runMain(t, "--pool", paged, "-o", tempPath(t, "x.arrow"), "--shim", env.Shim, "--", "touch", marker)
	oneLine := "record: --pool " + paged + ": size_class.arena_paging: the pool inside the program has no paged arena; " +
		"write the config with `analyze --arena fixed --emit-config`\n"
	if code != 1 || stderr != oneLine {
		t.Errorf("paged pool.json: exit %d, stderr %q; want 1 and %q", code, stderr, oneLine)
	}
	notExist(t, marker)
}

// The pool's summary says how much idle memory it gave back, when it gave back any.
func TestPrintPoolSaysWhatWasGivenBack(t *testing.T) {
	p := &trace.PoolActivity{Reservations: 76, Fallbacks: 74, PeakReservedBytes: 780 << 20, IdleReleases: 73,
		IdleReleasedBytes: 584 << 20}
	var b strings.Builder
	printPool(&b, p)
	want := "allocscope: pool: peak reserved 780.00 MiB in 76 reservation(s), 74 fallback(s), 0 request(s) passed to CUDA, " +
		"0 synchronization(s) of its own (0s)\n" +
		"allocscope: pool: gave back 73 idle region(s) of 584.00 MiB to CUDA when the device was out of memory\n"
	if b.String() != want {
		t.Errorf("summary\n%q\nwant\n%q", b.String(), want)
	}
	p.IdleReleases, p.IdleReleasedBytes = 0, 0
	b.Reset()
	printPool(&b, p)
	if strings.Contains(b.String(), "gave back") {
		t.Errorf("without a give-back: %q", b.String())
	}
}
