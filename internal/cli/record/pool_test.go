package record

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/poolactivity"
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
		"a full class with frees pending: syncs 0, barriers 1\nreused a pending block: yes\nexported a pool block: 1\n" +
		"driver allocation calls: 1\n"
	wantErr := "allocscope: the program asked for an IPC handle (cudaIpcGetMemHandle) of a block of record --pool's pool; " +
		"refused with an invalid-value error, as CUDA refuses stream-ordered blocks: record this program without --pool\n" +
		"allocscope: warning: the program asked for IPC handles of 1 pool block(s) (cudaIpcGetMemHandle); " +
		"they were refused with an invalid-value error: record it without --pool\n"
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
	p := poolOf(t, info)
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
		"write the config with `analyze --emit-config` (without --arena paged)\n"
	if code != 1 || stderr != oneLine {
		t.Errorf("paged pool.json: exit %d, stderr %q; want 1 and %q", code, stderr, oneLine)
	}
	notExist(t, marker)
}

// record --pool says, even with -q, how many requests went to CUDA and why, and the trace keeps the
// counts (testdata/progs/pool_faults.c, a thread without a context making two driver allocations):
// with a pool, the main thread's three allocations are served and the thread's two pass (no
// context); with a plan larger than the fake driver's 16 GiB, the pool cannot be made, the three
// pass too (no pool), and a second line names the reservation's CUDA error.
func TestRecordPoolSaysWhatWentToCUDA(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte(`{"version": 1, "policy": "sizeclass", "size_class": {"arena_bytes": 34359738368,
		"classes": [{"size_bytes": 4096, "slots": 4}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cfg, wantErr string
		passedBy           map[string]int64
		notMade, firstErr  int64
	}{
		{"pool", filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass.json"),
			"allocscope: record --pool served 3 of 5 allocations; 2 went to CUDA: 2 no_context\n",
			map[string]int64{"no_context": 2}, 0, 0},
		{"no pool", huge,
			"allocscope: cannot reserve the pool on device 0 (error 2); its allocations go to CUDA\n" +
				"allocscope: record --pool served 0 of 5 allocations; 5 went to CUDA: 3 no_pool, 2 no_context\n" +
				"allocscope: record --pool could not make 1 pool(s): the first reservation of the plan failed with " +
				"CUDA_ERROR_OUT_OF_MEMORY (2); its allocations went to CUDA\n",
			map[string]int64{"no_pool": 3, "no_context": 2}, 1, 2},
	}
	for _, c := range cases {
		out := filepath.Join(dir, c.name+".arrow")
		t.Setenv("FAKECUDA_LAZY_CONTEXT", "1")
		code, stdout, stderr := runMain(t, "-q", "--pool", c.cfg, "-o", out, "--shim", env.Shim, "--", env.Prog("pool_faults"))
		if want := "runtime calls: 0, driver calls without a context: 0\n"; code != 0 || stdout != want || stderr != c.wantErr {
			t.Errorf("%s: exit %d, stdout %q, stderr\n%s\nwant\n%s", c.name, code, stdout, stderr, c.wantErr)
		}
		_, info := testcuda.ReadTrace(t, out)
		p := poolOf(t, info)
		if p == nil {
			t.Fatalf("%s: trace has no pool activity", c.name)
		}
		if p.PassedThrough != 2+3*c.notMade || !maps.Equal(p.PassedBy, c.passedBy) || p.PoolsNotMade != c.notMade ||
			p.FirstNotMadeError != c.firstErr {
			t.Errorf("%s: pool activity %+v; want passed by %v, %d pool(s) not made, first error %d",
				c.name, *p, c.passedBy, c.notMade, c.firstErr)
		}
	}
}

// record --pool of a program that forks (testdata/progs/pooled_fork.c): each process makes its own
// pool of sizeclass.json's 277.5 MiB plan, and the summary's peak reserved is their sum, labelled
// so, beside the largest pool's.
func TestRecordPoolPeakSummedOverProcesses(t *testing.T) {
	env := testcuda.Build(t)
	out := tempPath(t, "fork.arrow")
	cfg := filepath.Join("..", "..", "..", "pool", "testdata", "sizeclass.json")
	code, _, stderr := runMain(t, "--pool", cfg, "-o", out, "--shim", env.Shim, "--", env.Prog("pooled_fork"))
	want := "allocscope: pool: peak reserved 555 MiB summed over the pools of every process (each pool's own peak; " +
		"the largest pool 277.5 MiB) in 2 reservation(s), 0 fallback(s), 0 request(s) passed to CUDA, " +
		"0 synchronization(s) of its own (0 ns)\n"
	if code != 0 || !strings.Contains(stderr, want) || strings.Contains(stderr, "went to CUDA") {
		t.Errorf("exit %d, stderr\n%s\nwant it to hold\n%s", code, stderr, want)
	}
	_, info := testcuda.ReadTrace(t, out)
	const plan = 512*1024 + 4096*256 + 65536*64 + 1048576*16 + 256<<20
	if p := poolOf(t, info); p == nil || p.PeakReservedBytes != plan || p.PeakReservedSumBytes != 2*plan || p.Reservations != 2 {
		t.Errorf("pool activity %+v; want peak %d, summed %d, 2 reservations", p, plan, 2*plan)
	}
}

// The pool's summary says how much idle memory it gave back, when it gave back any.
func TestPrintPoolSaysWhatWasGivenBack(t *testing.T) {
	p := &poolactivity.Activity{Reservations: 76, Fallbacks: 74, PeakReservedBytes: 780 << 20, IdleReleases: 73,
		IdleReleasedBytes: 584 << 20}
	var b strings.Builder
	printPool(&b, p)
	want := "allocscope: pool: peak reserved 780 MiB in 76 reservation(s), 74 fallback(s), 0 request(s) passed to CUDA, " +
		"0 synchronization(s) of its own (0 ns)\n" +
		"allocscope: pool: gave back 73 idle region(s) of 584 MiB to CUDA when the device was out of memory\n"
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

// poolOf decodes the pool activity of a trace's metadata (trace.Info.Pool); nil when it has none.
func poolOf(t *testing.T, info trace.Info) *poolactivity.Activity {
	t.Helper()
	p, err := poolactivity.Decode(info.Pool)
	if err != nil {
		t.Fatalf("pool activity %s: %v", info.Pool, err)
	}
	return p
}
