package cpool_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/requests/requeststest"
	"github.com/allocscope/allocscope/pool"
)

// traces are the recorded traces that replay's tests and benchmarks use, with the pool.json
// analyze wrote for each.
var traces = []string{"pytorch-train", "a_static", "e_cupy", "g_torch_nocache_cnn", "h_torch_nocache_kvcache"}

// loadTrace returns a trace's requests and its pool.json, without a paged arena (the C pool has
// none: record --pool refuses it).
func loadTrace(t testing.TB, name string) (*requests.Trace, pool.Config) {
	t.Helper()
	path := filepath.Join("..", "..", "..", "testdata", "h200", name+".arrow")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join("..", "..", "cli", "analyze", "bundled", name+".arrow") // the bundled trace
	}
	tr, err := requests.ExtractFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pool.LoadConfig(filepath.Join("..", "..", "..", "testdata", "h200", name+".pool.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SizeClass.ArenaPaging = nil
	return tr, cfg
}

// variants returns cfg as it is and varied: classes that must grow, a small capped arena (some
// requests fail), per-stream free lists, best-aged placement.
func variants(cfg pool.Config) map[string]pool.Config {
	vary := func(f func(sc *pool.SizeClassConfig, bf *pool.BestFitConfig)) pool.Config {
		c, sc, bf := cfg, *cfg.SizeClass, pool.BestFitConfig{}
		sc.Classes = slices.Clone(sc.Classes)
		if cfg.BestFit != nil {
			bf = *cfg.BestFit
		}
		f(&sc, &bf)
		c.SizeClass, c.BestFit = &sc, &bf
		return c
	}
	return map[string]pool.Config{
		"as-recommended": cfg,
		"grow": vary(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) {
			for i := range sc.Classes {
				sc.Classes[i].Slots = min(sc.Classes[i].Slots, 2)
			}
			sc.GrowSlots = 3
		}),
		"capped": vary(func(sc *pool.SizeClassConfig, bf *pool.BestFitConfig) {
			sc.ArenaBytes, bf.GrowBytes, bf.MaximumBytes = 4<<20, 2<<20, 64<<20
		}),
		"per-stream": vary(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) { sc.PerStream = true }),
		"best-aged":  vary(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) { sc.ArenaFit = pool.FitBestAged }),
	}
}

// sizeClassConfig is a small size-class pool.json: four classes and a 4 MiB arena.
func sizeClassConfig() pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes:        []pool.Class{{Size: 512, Slots: 16}, {Size: 1024, Slots: 8}, {Size: 4096, Slots: 8}, {Size: 65536, Slots: 4}},
		LargeThreshold: 65536, ArenaBytes: 4 << 20}}
}

// regions is an Upstream that hands out address space on a line, each region 2 MiB-aligned after
// the last, and records the regions in order, so that an address can be named by its region and its
// offset there. The pools place blocks by address (ties go to the lower one), so the two runs a
// test compares must see the same addresses for the same reserves: mmap's differ from run to run.
// Neither pool touches the memory it serves.
type regions struct {
	addrs, sizes []uint64
	next, live   uint64
	failAt       int   // the 1-based reserve that fails with failErr; 0: none
	failErr      error // what it fails with
}

// regionsBase is where the first region starts.
const regionsBase = 1 << 40

func (r *regions) Reserve(size uint64) (uint64, error) {
	if len(r.addrs)+1 == r.failAt {
		r.failAt = 0
		return 0, r.failErr
	}
	if r.next == 0 {
		r.next = regionsBase
	}
	addr := r.next
	r.next = (addr + size + 2<<20 - 1) &^ (2<<20 - 1)
	r.addrs, r.sizes = append(r.addrs, addr), append(r.sizes, size)
	r.live += size
	return addr, nil
}

func (r *regions) Release(addr, size uint64) error {
	i := slices.Index(r.addrs, addr)
	if i < 0 || r.sizes[i] != size {
		return fmt.Errorf("release %#x (%d bytes): not a region", addr, size)
	}
	r.live -= size
	return nil
}

// place names addr as "region#offset", "-" for 0.
func (r *regions) place(addr uint64) string {
	for i, a := range r.addrs {
		if addr >= a && addr-a < r.sizes[i] {
			return fmt.Sprintf("%d#%d", i, addr-a)
		}
	}
	if addr == 0 {
		return "-"
	}
	return fmt.Sprintf("outside:%#x", addr)
}

// outcome is what a run did, addresses as places: every op's, the failed ops, the counters.
type outcome struct {
	places      []string
	failed      []int
	stats, peak pool.Stats
}

// goRun serves ops with package pool as Run serves them with the C pool: an allocation into its
// slot, the free of its slot's live block, skipped when there is none.
func goRun(t testing.TB, cfg pool.Config, ops []requests.Op, handles []uint64, up *regions) (outcome, []error) {
	a, err := pool.New(cfg, up)
	if err != nil {
		t.Fatal(err)
	}
	var out outcome
	var errs []error
	slots := map[uint32]uint64{}
	for i, o := range ops {
		var addr uint64
		switch {
		case o.IsAlloc():
			addr, err = a.Alloc(o.Size, handles[o.StreamIndex()])
			slots[o.Slot] = addr
		case o.IsFree() && slots[o.Slot] != 0:
			addr = slots[o.Slot]
			delete(slots, o.Slot)
			err = a.Free(addr, handles[o.StreamIndex()])
		}
		if err != nil {
			out.failed, errs, err = append(out.failed, i), append(errs, err), nil
		}
		out.places = append(out.places, up.place(addr))
	}
	out.stats, out.peak = a.Stats(), a.PeakStats()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return out, errs
}

// cRun serves ops with the C pool in one Run.
func cRun(t testing.TB, cfg pool.Config, ops []requests.Op, handles []uint64, up *regions) (outcome, *cpool.Result) {
	res, err := cpool.Run(cfg, ops, handles, up, true)
	if err != nil {
		t.Fatal(err)
	}
	out := outcome{stats: res.Stats, peak: res.PeakStats}
	for _, a := range res.Addrs {
		out.places = append(out.places, up.place(a))
	}
	for _, f := range res.Failures {
		out.failed = append(out.failed, f.Op)
	}
	return out, res
}

// compare fails t at the first difference between the Go pool's outcome and the C pool's.
func compare(t *testing.T, g, c outcome) {
	t.Helper()
	for i := range min(len(g.places), len(c.places)) {
		if g.places[i] != c.places[i] {
			t.Fatalf("op %d: Go pool at %s, C pool at %s", i, g.places[i], c.places[i])
		}
	}
	if len(g.places) != len(c.places) || !slices.Equal(g.failed, c.failed) || g.stats != c.stats || g.peak != c.peak {
		t.Fatalf("Go pool: %d ops, failed %v\n stats %+v\n peak %+v\nC pool: %d ops, failed %v\n stats %+v\n peak %+v",
			len(g.places), g.failed, g.stats, g.peak, len(c.places), c.failed, c.stats, c.peak)
	}
}

// TestRunMatchesGoPool serves every trace of replay's tests under its pool.json and variants, and
// random sequences, with the C pool in one Run and with package pool on the host backend: every
// block is at the same offset of the same region, the same requests fail, and the counters (after
// the last op and at peak reserved memory) are equal.
func TestRunMatchesGoPool(t *testing.T) {
	needCgo(t)
	type input struct {
		name    string
		cfg     pool.Config
		ops     []requests.Op
		handles []uint64
	}
	var inputs []input
	for _, name := range traces {
		tr, cfg := loadTrace(t, name)
		inputs = append(inputs, input{name, cfg, tr.Ops, tr.Streams})
	}
	for seed := range uint64(3) {
		ops, handles := requeststest.RandomOps(seed, 5000, 25)
		inputs = append(inputs, input{fmt.Sprintf("random%d", seed), sizeClassConfig(), ops, handles})
	}
	var failed, fallbacks uint64
	for _, in := range inputs {
		for vname, cfg := range variants(in.cfg) {
			t.Run(in.name+"/"+vname, func(t *testing.T) {
				gup, cup := &regions{}, &regions{}
				g, _ := goRun(t, cfg, in.ops, in.handles, gup)
				c, _ := cRun(t, cfg, in.ops, in.handles, cup)
				compare(t, g, c)
				if gup.live != 0 || cup.live != 0 {
					t.Errorf("still reserved after Close: Go pool %d bytes, C pool %d", gup.live, cup.live)
				}
				failed, fallbacks = failed+c.stats.Failures, fallbacks+c.stats.Fallbacks
			})
		}
	}
	if failed == 0 || fallbacks == 0 {
		t.Errorf("%d failed allocations and %d fallbacks in all: each path must be taken", failed, fallbacks)
	}
}

// An allocation the C pool cannot serve is reported with its op index and code, and an error that
// wraps the reason: the arena at its maximum, or the upstream's own error.
func TestRunReportsUnservableRequests(t *testing.T) {
	needCgo(t)
	ops, handles := requeststest.RandomOps(1, 3000, 25)
	capped := variants(sizeClassConfig())["capped"]
	g, gerrs := goRun(t, capped, ops, handles, &regions{})
	c, res := cRun(t, capped, ops, handles, &regions{})
	compare(t, g, c)
	if len(res.Failures) == 0 {
		t.Fatal("no request failed")
	}
	for i, f := range res.Failures {
		want := fmt.Sprintf("alloc %d bytes: arena at its maximum: out of memory", ops[f.Op].Size)
		if f.Code != cpool.CodeOutOfMemory || !errors.Is(f.Err, pool.ErrOutOfMemory) || f.Err.Error() != want ||
			!errors.Is(gerrs[i], pool.ErrOutOfMemory) {
			t.Errorf("failure %+v (%v), Go pool's %v; want %s, %q", f, f.Code, gerrs[i], cpool.CodeOutOfMemory, want)
		}
	}

	// The upstream's third reserve fails: a class growth or an arena growth.
	broken := errors.New("device lost")
	grow := variants(sizeClassConfig())["grow"]
	g, _ = goRun(t, grow, ops, handles, &regions{failAt: 3, failErr: broken})
	c, res = cRun(t, grow, ops, handles, &regions{failAt: 3, failErr: broken})
	compare(t, g, c)
	if len(res.Failures) != 1 {
		t.Fatalf("failures %+v, want one", res.Failures)
	}
	f := res.Failures[0]
	want := fmt.Sprintf("alloc %d bytes: reserve %d bytes from upstream: device lost", ops[f.Op].Size, ops[f.Op].Size)
	if f.Op != g.failed[0] || f.Code != cpool.CodeError || !errors.Is(f.Err, broken) || !strings.HasPrefix(f.Err.Error(), want[:20]) {
		t.Errorf("failure %+v (%v), want op %d, %s, an error wrapping %q", f, f.Err, g.failed[0], cpool.CodeError, broken)
	}
}

// New and Check refuse what the shim's pool does not implement with the error record --pool gives.
func TestNewRefusesWhatTheShimRefuses(t *testing.T) {
	needCgo(t)
	paged := sizeClassConfig()
	paged.SizeClass.ArenaPaging = &pool.ArenaPaging{}
	many := sizeClassConfig()
	many.SizeClass.Classes = nil
	for i := range 65 {
		many.SizeClass.Classes = append(many.SizeClass.Classes, pool.Class{Size: uint64(512 * (i + 1)), Slots: 1})
	}
	many.SizeClass.LargeThreshold = 0
	bestfit := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyBestFit, BestFit: &pool.BestFitConfig{}}
	for name, cfg := range map[string]pool.Config{"paged": paged, "65 classes": many, "bestfit": bestfit} {
		_, want := intercept.PoolSpec(cfg)
		if want == nil {
			t.Fatalf("%s: PoolSpec accepts it", name)
		}
		p, err := cpool.New(cfg, host.New(1<<30))
		if p != nil || err == nil || err.Error() != want.Error() || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: New = %v, %v; want %q", name, p, err, want)
		}
		if err := cpool.Check(cfg); err == nil || err.Error() != want.Error() {
			t.Errorf("%s: Check = %v; want %q", name, err, want)
		}
	}
	if err := cpool.Check(sizeClassConfig()); err != nil {
		t.Errorf("Check(sizeclass) = %v", err)
	}
}

// A Pool is a pool.Allocator: single requests, the counters, Close and what follows it.
func TestPoolIsAnAllocator(t *testing.T) {
	needCgo(t)
	h := host.New(1 << 30)
	defer h.Close()
	var a pool.Allocator
	p, err := cpool.New(sizeClassConfig(), h)
	if err != nil {
		t.Fatal(err)
	}
	a = p
	x, err1 := a.Alloc(600, 0)
	y, err2 := a.Alloc(5<<20, 0) // above the 4 MiB arena: a growth, a fallback
	if err := errors.Join(err1, err2, a.Free(x, 0)); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(x, 0); !errors.Is(err, pool.ErrUnknownAddress) || err.Error() != fmt.Sprintf("free %#x: unknown address", x) {
		t.Errorf("double free: %v", err)
	}
	s := a.Stats()
	if s.Allocs != 2 || s.Frees != 1 || s.LiveBytes != 5<<20 || s.Fallbacks != 1 || s.UpstreamReserves != 2 {
		t.Errorf("stats %+v", s)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(1, 0); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
	if _, err := p.Run(&cpool.Ops{}, false); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if s := a.Stats(); s.ReservedBytes != 0 || s.UpstreamReleases != 2 || a.Close() != nil || y == 0 {
		t.Errorf("after Close: stats %+v", s)
	}
	if free, total, _ := h.MemGetInfo(); free != total {
		t.Errorf("the host backend still maps %d bytes", total-free)
	}
}

// Run times each request when asked (every request a latency, no other op one) and the loop always.
func TestRunTimesRequests(t *testing.T) {
	needCgo(t)
	ops, handles := requeststest.RandomOps(2, 2000, 25)
	h := host.New(1 << 40)
	defer h.Close()
	for _, perRequest := range []bool{false, true} {
		res, err := cpool.Run(sizeClassConfig(), ops, handles, h, perRequest)
		if err != nil {
			t.Fatal(err)
		}
		if res.ElapsedNs <= 0 || (res.LatencyNs != nil) != perRequest {
			t.Fatalf("per request %v: elapsed %d ns, %d latencies", perRequest, res.ElapsedNs, len(res.LatencyNs))
		}
		for i, ns := range res.LatencyNs {
			made := ops[i].IsAlloc() || res.Addrs[i] != 0
			if made != (ns > 0) {
				t.Fatalf("op %d (%+v, address %#x): latency %d ns", i, ops[i], res.Addrs[i], ns)
			}
		}
	}
}

// needCgo skips t in a build without cgo.
func needCgo(t testing.TB) {
	if !cpool.Available {
		t.Skip("the C pool needs cgo")
	}
}

// Without cgo, every way to the C pool says it needs cgo.
func TestStubNeedsCgo(t *testing.T) {
	if cpool.Available {
		t.Skip("a build with cgo")
	}
	_, err1 := cpool.New(sizeClassConfig(), host.New(1<<30))
	_, err2 := cpool.Run(sizeClassConfig(), nil, nil, host.New(1<<30), false)
	for _, err := range []error{err1, err2, cpool.Check(sizeClassConfig())} {
		if err != cpool.ErrNeedsCgo {
			t.Errorf("err = %v, want %v", err, cpool.ErrNeedsCgo)
		}
	}
}

// The package builds without cgo: its stub says the C pool needs it.
func TestBuildsWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gocmd); err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(gocmd, "vet", ".", "../../replay")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go vet: %v\n%s", err, out)
	}
}

// idleStep is a step of TestPoolGivesBackIdleMemory: an allocation of size bytes, else the free of
// the block of step free, else (release) the give-back.
type idleStep struct {
	size    uint64
	free    int
	release bool
}

// runIdleSteps serves steps with a on a device of capacity bytes and returns what each step gave
// (an address, "freed", the bytes given back, or the error) and the counters.
func runIdleSteps(t *testing.T, a interface {
	pool.Allocator
	pool.IdleReleaser
}, steps []idleStep) ([]string, pool.Stats) {
	t.Helper()
	var out []string
	addrs := make([]uint64, len(steps))
	for i, s := range steps {
		switch {
		case s.release:
			out = append(out, fmt.Sprintf("released %d", a.ReleaseIdle()))
		case s.size > 0:
			addr, err := a.Alloc(s.size, 0)
			addrs[i] = addr
			if err != nil {
				out = append(out, fmt.Sprintf("failed (out of memory: %v)", errors.Is(err, pool.ErrOutOfMemory)))
				continue
			}
			out = append(out, fmt.Sprintf("%#x", addr))
		default:
			if err := a.Free(addrs[s.free], 0); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			out = append(out, "freed")
		}
	}
	return out, a.Stats()
}

// The C pool gives back idle memory as package pool does: 600 blocks of 1 MiB freed, then 700 MiB
// asked for on a device of 1 GiB (the 73 grown slabs go back, the arena grows); an arena segment
// given back for a larger one; the give-back called on its own. Every address and counter is the
// Go pool's, and the upstream holds the same.
func TestPoolGivesBackIdleMemory(t *testing.T) {
	needCgo(t)
	const mib = 1 << 20
	big := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes: []pool.Class{{Size: mib, Slots: 16}}, LargeThreshold: mib, ArenaBytes: 64 * mib, GrowSlots: 8},
		BestFit: &pool.BestFitConfig{GrowBytes: 64 * mib}}
	var smallThenBig []idleStep
	for range 600 {
		smallThenBig = append(smallThenBig, idleStep{size: mib})
	}
	for i := range 600 {
		smallThenBig = append(smallThenBig, idleStep{free: i})
	}
	smallThenBig = append(smallThenBig, idleStep{size: 700 * mib}, idleStep{release: true})
	arena := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes: []pool.Class{{Size: 4096, Slots: 1}}, LargeThreshold: 4096}}
	segments := []idleStep{{size: 2 * mib}, {size: 6 * mib}, {free: 1}, {size: 7 * mib}, {size: 9 * mib},
		{free: 0}, {free: 3}, {release: true}, {release: true}, {size: 9 * mib}}
	for _, tc := range []struct {
		name      string
		cfg       pool.Config
		capacity  uint64
		steps     []idleStep
		last      string // what the last step gave
		idle      uint64 // the bytes given back in all
		reserved  uint64
		failures  uint64
		upstreams uint64 // upstream failures
	}{
		{"small-then-big", big, 1 << 30, smallThenBig, "released 0", 584 * mib, 780 * mib, 0, 1},
		{"arena-segments", arena, 10 * mib, segments, fmt.Sprintf("%#x", poolsim.Base+4096+2*mib), 15 * mib, 4096 + 9*mib, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gup, cup := poolsim.NewUpstream(tc.capacity, 512), poolsim.NewUpstream(tc.capacity, 512)
			g, err := pool.New(tc.cfg, gup)
			if err != nil {
				t.Fatal(err)
			}
			c, err := cpool.New(tc.cfg, cup)
			if err != nil {
				t.Fatal(err)
			}
			gOut, gStats := runIdleSteps(t, g.(interface {
				pool.Allocator
				pool.IdleReleaser
			}), tc.steps)
			cOut, cStats := runIdleSteps(t, c, tc.steps)
			if !slices.Equal(gOut, cOut) || gStats != cStats || g.PeakStats() != c.PeakStats() {
				t.Fatalf("Go pool %v\n %+v\nC pool %v\n %+v", gOut, gStats, cOut, cStats)
			}
			if gOut[len(gOut)-1] != tc.last || cStats.IdleReleasedBytes != tc.idle || cStats.ReservedBytes != tc.reserved ||
				cStats.Failures != tc.failures || cStats.UpstreamFailures != tc.upstreams {
				t.Errorf("steps %v\nstats %+v", cOut, cStats)
			}
			if gup.Stats() != cup.Stats() {
				t.Errorf("upstreams: Go pool's %+v, C pool's %+v", gup.Stats(), cup.Stats())
			}
			if err := errors.Join(g.Close(), c.Close()); err != nil || cup.Stats().ReservedBytes != 0 {
				t.Errorf("close: %v, %d bytes still held", err, cup.Stats().ReservedBytes)
			}
		})
	}
}
