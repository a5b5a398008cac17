package record

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/allocscope/allocscope/internal/cli/analyze"
	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/pool"
)

// defaultPoolJSON runs `analyze --quiet --emit-config` on trace with no other flag and returns
// the pool.json it wrote and its config.
func defaultPoolJSON(t *testing.T, trace string) (string, pool.Config) {
	t.Helper()
	out := tempPath(t, "pool.json")
	var stdout, stderr bytes.Buffer
	if code := analyze.Main([]string{"--quiet", "--emit-config", out, trace}, &stdout, &stderr); code != 0 {
		t.Fatalf("analyze %s: exit %d: %s", trace, code, stderr.String())
	}
	cfg, err := pool.LoadConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, cfg
}

// planBytes is what a size-class config reserves up front: its class slots and its arena.
func planBytes(cfg pool.Config) uint64 {
	n := cfg.SizeClass.ArenaBytes
	for _, c := range cfg.SizeClass.Classes {
		n += c.Size * c.Slots
	}
	return n
}

// The pool.json analyze writes by default runs everywhere: for the bundled trace and for the
// KV-cache snapshot (whose paged arena analyze names beside the one-region pool), it is a
// one-region size-class pool that package pool and the C pool both make, reserving the same plan
// in one call, and that record --pool runs a program on with the fake driver: the pool is made,
// reserves that plan once and serves all 100 of loop's allocations. Its prediction for record
// --pool is there for the trace of CUDA calls and absent for the snapshot of PyTorch's blocks.
func TestDefaultPoolJSONRunsEverywhere(t *testing.T) {
	env := testcuda.Build(t)
	root := filepath.Join("..", "..", "..")
	for _, c := range []struct {
		trace      string
		recordPool bool
	}{
		{filepath.Join(root, "internal", "cli", "analyze", "bundled", "pytorch-train.arrow"), true},
		{filepath.Join(root, "testdata", "torch", "kvcache.caching.snapshot.pickle.gz"), false},
	} {
		t.Run(filepath.Base(c.trace), func(t *testing.T) {
			path, cfg := defaultPoolJSON(t, c.trace)
			if cfg.Policy != pool.PolicySizeClass || cfg.SizeClass.ArenaPaging != nil || cfg.Prediction == nil ||
				(cfg.Prediction.RecordPool != nil) != c.recordPool {
				t.Fatalf("config %+v, prediction %+v: want a one-region size-class pool, record --pool's prediction %v",
					cfg, cfg.Prediction, c.recordPool)
			}
			plan := planBytes(cfg)
			for name, make := range map[string]func(pool.Upstream) (pool.Allocator, error){
				"package pool": func(up pool.Upstream) (pool.Allocator, error) { return pool.New(cfg, up) },
				"C pool":       func(up pool.Upstream) (pool.Allocator, error) { return cpool.New(cfg, up) },
			} {
				if name == "C pool" && !cpool.Available {
					continue
				}
				a, err := make(poolsim.NewUpstream(0, pool.DefaultAlignment))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if s := a.Stats(); s.UpstreamReserves != 1 || s.ReservedBytes != plan {
					t.Errorf("%s: %d reservations of %d bytes, want 1 of %d", name, s.UpstreamReserves, s.ReservedBytes, plan)
				}
				if err := a.Close(); err != nil {
					t.Errorf("%s: close: %v", name, err)
				}
			}
			out := tempPath(t, "pooled.arrow")
			code, stdout, stderr := runMain(t, "-q", "--pool", path, "-o", out, "--shim", env.Shim, "--", env.Prog("loop"), "100")
			if code != 0 || stdout != "loop: 100 pairs through the runtime, 0 failures\n" {
				t.Fatalf("record --pool: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			_, info := testcuda.ReadTrace(t, out)
			p := poolOf(t, info)
			if p == nil || p.PoolsNotMade != 0 || p.Reservations != 1 || p.PeakReservedBytes != plan || p.PassedThrough != 0 {
				t.Errorf("pool activity %s; want the plan of %d bytes reserved once, nothing passed to CUDA", fmt.Sprintf("%+v", p), plan)
			}
		})
	}
}
