package intercept

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/requests/requeststest"
	"github.com/allocscope/allocscope/pool"
)

// The shim's C pool (cpool/pool.c) against its specification, package pool's size-class policy:
// the same request sequences (every device trace and snapshot of testdata, under its recommended
// pool.json and variants that grow classes, fill a capped arena, keep free lists per stream and
// place by age, plus random sequences; and on an upstream of limited capacity, where growths find it
// out of memory and the pool gives back its idle regions, and with the give-back called now and
// then) give the same address for every block, the same failures, and the same counters (during, at
// peak reserved, after Close).
func TestCPoolMatchesPool(t *testing.T) {
	comparePools(t, buildCPoolDriver(t))
}

// TestCPoolMatchesPoolBeyondItsBook: the same with a book too small for the plan (its tables move
// to mappings of their own as they grow), with none at all, and with a book made beforehand (as
// record --pool makes it at cuInit) that fits the plan or is too small for it.
func TestCPoolMatchesPoolBeyondItsBook(t *testing.T) {
	for _, limit := range []string{"4096", "0"} {
		t.Run("book "+limit, func(t *testing.T) { comparePools(t, buildCPoolDriverWith(t, "-DCP_BOOK_LIMIT="+limit)) })
	}
	for _, extra := range []string{"0", "-8192"} {
		t.Run("given book "+extra, func(t *testing.T) { comparePools(t, buildCPoolDriverWith(t, "-DCP_GIVEN_BOOK="+extra)) })
	}
}

// comparePools runs every case of cpoolCases with the Go pool and with driver, the C pool, and
// compares their outputs line by line.
func comparePools(t *testing.T, driver string) {
	var failures, fallbacks, frees, syncs, idle, idleCalls uint64
	for _, tc := range cpoolCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			goOut := runGoPool(t, tc)
			var s [16]uint64
			fmt.Sscanf(goOut[len(goOut)-3], "stats %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", &s[0], &s[1], &s[2],
				&s[3], &s[4], &s[5], &s[6], &s[7], &s[8], &s[9], &s[10], &s[11], &s[12], &s[13], &s[14], &s[15])
			frees, failures, fallbacks, syncs = frees+s[1], failures+s[2], fallbacks+s[12], syncs+s[13]
			if tc.releaseEvery == 0 {
				idle += s[14] // given back for growths that found the upstream out of memory
			}
			for _, line := range goOut {
				if strings.HasPrefix(line, "r ") && line != "r 0" {
					idleCalls++
				}
			}
			cOut := runCPool(t, driver, tc)
			if len(goOut) != len(cOut) {
				t.Fatalf("Go pool wrote %d lines, C pool %d", len(goOut), len(cOut))
			}
			for i := range goOut {
				if goOut[i] != cOut[i] {
					t.Fatalf("line %d: Go pool %q, C pool %q", i, goOut[i], cOut[i])
				}
			}
		})
	}
	if failures == 0 || fallbacks == 0 || frees == 0 || syncs == 0 || idle == 0 || idleCalls == 0 {
		t.Errorf("the cases made %d frees, %d failed allocations, %d fallbacks, %d syncs, %d idle regions given back for "+
			"growths and %d give-back calls that gave back some: each path must be taken", frees, failures, fallbacks, syncs, idle, idleCalls)
	}
	t.Logf("%d frees, %d failed allocations, %d fallbacks, %d syncs, %d idle regions given back for growths, %d give-back calls that gave some compared",
		frees, failures, fallbacks, syncs, idle, idleCalls)
}

type cpoolCase struct {
	name    string
	cfg     pool.Config
	ops     []requests.Op
	handles []uint64
	// deferred serves as record --pool does: the free of an op that synchronizes (a cudaFree) is
	// deferred, and an op that is only a sync point is a device synchronization.
	deferred bool
	// capacity, when not 0, is what the upstream holds at most (bumpUpstream.capacity).
	capacity uint64
	// releaseEvery, when not 0, calls the pool's give-back (ReleaseIdle, cp_release_idle) after
	// every releaseEvery-th op.
	releaseEvery int
}

// cpoolCases returns the traces of testdata with their configs and variants, and random sequences.
func cpoolCases(t *testing.T) []cpoolCase {
	t.Helper()
	base := loadConfig(t, filepath.Join("..", "..", "pool", "testdata", "sizeclass.json"))
	var cases []cpoolCase
	traces, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "h200", "*.arrow"))
	traces = append(traces, filepath.Join("..", "..", "internal", "cli", "analyze", "bundled", "pytorch-train.arrow"))
	snaps, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "torch", "*.caching.snapshot.pickle.gz"))
	for _, path := range append(traces, snaps...) {
		tr := extractTrace(t, path)
		name := strings.Split(filepath.Base(path), ".")[0]
		cfg := base
		if own := strings.TrimSuffix(path, ".arrow") + ".pool.json"; fileExists(own) {
			cfg = loadConfig(t, own)
			if cfg.SizeClass.ArenaPaging != nil { // the C pool has no paged arena (record --pool refuses it)
				cfg.SizeClass.ArenaPaging = nil
			}
		}
		for _, v := range cpoolVariants(cfg) {
			cases = append(cases, cpoolCase{name: name + "/" + v.name, cfg: v.cfg, ops: tr.Ops, handles: tr.Streams})
		}
		cases = append(cases, cpoolCase{name: name + "/deferred", cfg: cfg, ops: tr.Ops, handles: tr.Streams, deferred: true})
		cases = append(cases, limitedCases(t, name, cpoolVariants(cfg), tr.Ops, tr.Streams)...)
	}
	for seed := range uint64(4) {
		ops, handles := requeststest.RandomOps(seed, 20000, 27)
		for _, v := range cpoolVariants(base) {
			name := fmt.Sprintf("random%d/%s", seed, v.name)
			cases = append(cases, cpoolCase{name: name, cfg: v.cfg, ops: ops, handles: handles})
			cases = append(cases, cpoolCase{name: name + "/deferred", cfg: v.cfg, ops: ops, handles: handles, deferred: true})
		}
		cases = append(cases, limitedCases(t, fmt.Sprintf("random%d", seed), cpoolVariants(base), ops, handles)...)
	}
	return cases
}

// limitedCases returns the variants that grow (classes that must grow, a capped arena, per-stream
// lists) on an upstream whose capacity is the plan plus half of what the pool grew by beyond it on an
// unbounded one, so that growths find it out of memory and the pool gives back its idle regions:
// served at once, deferred, and with the give-back called every 500 ops.
func limitedCases(t *testing.T, name string, variants []cpoolVariant, ops []requests.Op, handles []uint64) []cpoolCase {
	var cases []cpoolCase
	for _, v := range variants {
		if v.name != "grow" && v.name != "capped" && v.name != "per-stream" {
			continue
		}
		up := &bumpUpstream{}
		a, err := pool.New(v.cfg, up)
		if err != nil {
			t.Fatal(err)
		}
		plan := up.held
		requests.NewFeeder(a).Feed(ops, handles)
		a.Close()
		if up.peak <= plan {
			continue // it never grew
		}
		c := cpoolCase{name: name + "/" + v.name + "/limited", cfg: v.cfg, ops: ops, handles: handles,
			capacity: plan + (up.peak-plan)/2}
		cases = append(cases, c)
		c.name, c.deferred = c.name+"/deferred", true
		cases = append(cases, c)
		c.name, c.deferred, c.releaseEvery = name+"/"+v.name+"/limited/release-idle", false, 500
		cases = append(cases, c)
	}
	return cases
}

type cpoolVariant struct {
	name string
	cfg  pool.Config
}

// cpoolVariants returns cfg as it is and varied: classes that must grow, a small capped arena,
// per-stream free lists, best-aged placement.
func cpoolVariants(cfg pool.Config) []cpoolVariant {
	clone := func(f func(sc *pool.SizeClassConfig, bf *pool.BestFitConfig)) pool.Config {
		c := cfg
		sc := *cfg.SizeClass
		sc.Classes = append([]pool.Class(nil), cfg.SizeClass.Classes...)
		bf := pool.BestFitConfig{}
		if cfg.BestFit != nil {
			bf = *cfg.BestFit
		}
		f(&sc, &bf)
		c.SizeClass, c.BestFit = &sc, &bf
		return c
	}
	return []cpoolVariant{
		{"as-recommended", cfg},
		{"grow", clone(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) {
			for i := range sc.Classes {
				sc.Classes[i].Slots = min(sc.Classes[i].Slots, 2)
			}
			sc.GrowSlots = 3
		})},
		{"capped", clone(func(sc *pool.SizeClassConfig, bf *pool.BestFitConfig) {
			sc.ArenaBytes = 4 << 20
			bf.GrowBytes, bf.MaximumBytes = 2<<20, 64<<20
		})},
		{"per-stream", clone(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) { sc.PerStream = true })},
		{"best-aged", clone(func(sc *pool.SizeClassConfig, _ *pool.BestFitConfig) { sc.ArenaFit = pool.FitBestAged })},
	}
}

// bumpUpstream is the driver's upstream: addresses from 0x100000000000 in 2 MiB steps, never
// reused. With a capacity, it holds at most that many bytes (its regions rounded up to 2 MiB).
type bumpUpstream struct{ next, capacity, held, peak uint64 }

func bumpRounded(size uint64) uint64 { return (size + 2<<20 - 1) &^ (2<<20 - 1) }

func (b *bumpUpstream) Reserve(size uint64) (uint64, error) {
	if b.capacity > 0 && b.held+bumpRounded(size) > b.capacity {
		return 0, fmt.Errorf("%d of %d bytes held: %w", b.held, b.capacity, pool.ErrOutOfMemory)
	}
	if b.next == 0 {
		b.next = 0x100000000000
	}
	addr := b.next
	b.next += bumpRounded(size)
	b.held += bumpRounded(size)
	b.peak = max(b.peak, b.held)
	return addr, nil
}

func (b *bumpUpstream) Release(addr, size uint64) error {
	b.held -= bumpRounded(size)
	return nil
}

// Synchronize is the driver's synchronization: the device is always done at once.
func (b *bumpUpstream) Synchronize() error { return nil }

// runGoPool serves the case's ops with package pool and returns the lines the driver would write.
func runGoPool(t *testing.T, tc cpoolCase) []string {
	a, err := pool.New(tc.cfg, &bumpUpstream{capacity: tc.capacity})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	addrs := map[uint32]uint64{}
	for i, o := range tc.ops {
		if line, _, ok := serveOp(a, o, tc, addrs); ok {
			out = append(out, line)
		}
		if line, _, ok := releaseIdle(a, tc, i); ok {
			out = append(out, line)
		}
	}
	before, peak := a.Stats(), a.PeakStats()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return append(out, statsLine("stats", before), statsLine("peak", peak), statsLine("closed", a.Stats()))
}

// serveOp serves o with a as the driver does, keeping the address of every live block in addrs: the
// driver's output line and its script line, ok false when o is not sent to the driver (a free of a
// block that was never served; a synchronization has a script line and no output).
func serveOp(a pool.Allocator, o requests.Op, tc cpoolCase, addrs map[uint32]uint64) (line, script string, ok bool) {
	stream := tc.handles[o.StreamIndex()]
	switch {
	case o.IsAlloc():
		script = fmt.Sprintf("a %x %d\n", o.Size, stream)
		addr, err := a.Alloc(o.Size, stream)
		if err != nil {
			delete(addrs, o.Slot)
			return errCode(err), script, true
		}
		addrs[o.Slot] = addr
		return fmt.Sprintf("%x", addr), script, true
	case o.IsFree():
		addr, live := addrs[o.Slot]
		if !live {
			return "", "", false
		}
		delete(addrs, o.Slot)
		op, free := "f", a.Free
		if d, isDeferrer := a.(pool.Deferrer); tc.deferred && o.Syncs() && isDeferrer {
			op, free = "d", d.FreeDeferred
		}
		script = fmt.Sprintf("%s %x %d\n", op, addr, stream)
		if err := free(addr, stream); err != nil {
			return errCode(err), script, true
		}
		return "ok", script, true
	case tc.deferred && o.Syncs():
		if d, isDeferrer := a.(pool.Deferrer); isDeferrer {
			d.Synced()
			return "", "s\n", false
		}
	}
	return "", "", false
}

// releaseIdle calls a's give-back after op i when the case says so: the driver's output line and its
// script line.
func releaseIdle(a pool.Allocator, tc cpoolCase, i int) (line, script string, ok bool) {
	if tc.releaseEvery == 0 || (i+1)%tc.releaseEvery != 0 {
		return "", "", false
	}
	return fmt.Sprintf("r %d", a.(pool.IdleReleaser).ReleaseIdle()), "r\n", true
}

func errCode(err error) string {
	switch {
	case errors.Is(err, pool.ErrOutOfMemory):
		return "E2"
	case errors.Is(err, pool.ErrUnknownAddress):
		return "E3"
	case errors.Is(err, pool.ErrClosed):
		return "E4"
	case errors.Is(err, pool.ErrFreedTwice):
		return "E6"
	}
	return "E1"
}

func statsLine(name string, s pool.Stats) string {
	return fmt.Sprintf("%s %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", name, s.Allocs, s.Frees, s.Failures,
		s.LiveBytes, s.PeakLiveBytes, s.BlockBytes, s.PeakBlockBytes, s.ReservedBytes, s.PeakReservedBytes,
		s.UpstreamReserves, s.UpstreamReleases, s.UpstreamFailures, s.Fallbacks, s.Syncs, s.IdleReleases,
		s.IdleReleasedBytes)
}

// runCPool runs the driver on the same requests, freeing only what the Go side could (the two
// sides agree on every allocation, or the comparison stops at the first that differs).
func runCPool(t *testing.T, driver string, tc cpoolCase) []string {
	var in strings.Builder
	in.WriteString(cpoolConfigLine(t, tc.cfg))
	cmd := exec.Command(driver, "-capacity", fmt.Sprint(tc.capacity))
	cmd.Stdin = strings.NewReader(in.String() + cpoolScript(t, tc))
	outBytes, err := cmd.Output()
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(outBytes), "\n"), "\n")
}

// cpoolScript writes the driver's script: it serves the ops with the Go pool to know the address of
// every block the driver must free (a free names an address).
func cpoolScript(t testing.TB, tc cpoolCase) string {
	a, err := pool.New(tc.cfg, &bumpUpstream{capacity: tc.capacity})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var b strings.Builder
	addrs := map[uint32]uint64{}
	for i, o := range tc.ops {
		_, script, _ := serveOp(a, o, tc, addrs)
		b.WriteString(script)
		_, script, _ = releaseIdle(a, tc, i)
		b.WriteString(script)
	}
	b.WriteString("c\n")
	return b.String()
}

func cpoolConfigLine(t testing.TB, cfg pool.Config) string {
	t.Helper()
	spec, err := PoolSpec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return spec + "\n"
}

// cpoolDrivers are the compiled drivers, by their extra compiler flags.
var cpoolDrivers struct {
	mu    sync.Mutex
	paths map[string]string
}

// buildCPoolDriver compiles testdata/cpool/driver.c with the shim's pool.h, once per test binary.
func buildCPoolDriver(t testing.TB) string { return buildCPoolDriverWith(t) }

// buildCPoolDriverWith compiles the driver with extra compiler flags (e.g. -DCP_BOOK_LIMIT=0), once
// per set of flags and test binary.
func buildCPoolDriverWith(t testing.TB, flags ...string) string {
	t.Helper()
	cpoolDrivers.mu.Lock()
	defer cpoolDrivers.mu.Unlock()
	key := strings.Join(flags, " ")
	if p, ok := cpoolDrivers.paths[key]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "allocscope-cpool-") // kept for the other tests of the binary
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "driver")
	args := append([]string{"-O2", "-Wall", "-I", "cpool", "-o", path}, flags...)
	cmd := exec.Command("cc", append(args, filepath.Join("testdata", "cpool", "driver.c"), filepath.Join("cpool", "pool.c"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the C pool driver: %v: %s", err, out)
	}
	if cpoolDrivers.paths == nil {
		cpoolDrivers.paths = map[string]string{}
	}
	cpoolDrivers.paths[key] = path
	return path
}

func loadConfig(t testing.TB, path string) pool.Config {
	t.Helper()
	cfg, err := pool.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != pool.PolicySizeClass {
		t.Fatalf("%s: policy %s, want sizeclass", path, cfg.Policy)
	}
	return cfg
}

func extractTrace(t testing.TB, path string) *requests.Trace {
	t.Helper()
	tr, err := requests.ExtractFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// BenchmarkCPoolClassHit times alloc/free pairs that a class serves from its free list, in the C
// pool alone (the shim's pool path without the hook): ns per request (alloc or free).
//
//	go test ./internal/intercept -run '^$' -bench CPoolClassHit -benchtime 5x
func BenchmarkCPoolClassHit(b *testing.B) {
	driver := buildCPoolDriver(b)
	cfg := cpoolConfigLine(b, loadConfig(b, filepath.Join("..", "..", "pool", "testdata", "sizeclass.json")))
	var best float64
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(driver)
		cmd.Stdin = strings.NewReader(cfg + "b 10000000 4000\nc\n")
		out, err := cmd.Output()
		if err != nil {
			b.Fatal(err)
		}
		var ns float64
		if _, err := fmt.Sscanf(string(out), "ns_per_request %g", &ns); err != nil {
			b.Fatalf("driver output %q", out)
		}
		if best == 0 || ns < best {
			best = ns
		}
	}
	b.ReportMetric(best, "ns/request")
	b.ReportMetric(0, "ns/op")
}

// PoolSpec refuses what the C pool does not implement, in one line each.
func TestPoolSpecRefuses(t *testing.T) {
	paged := loadConfig(t, filepath.Join("..", "..", "pool", "testdata", "sizeclass-paged.json"))
	bestfit, err := pool.LoadConfig(filepath.Join("..", "..", "pool", "testdata", "bestfit.json"))
	if err != nil {
		t.Fatal(err)
	}
	for cfg, want := range map[*pool.Config]string{
		&paged:   "size_class.arena_paging: the pool inside the program has no paged arena; write the config with `analyze --emit-config` (without --arena paged)",
		&bestfit: `policy "bestfit": the pool inside the program implements "sizeclass" only (analyze --emit-config writes one)`,
	} {
		if _, err := PoolSpec(*cfg); err == nil || err.Error() != want {
			t.Errorf("PoolSpec: %v, want %q", err, want)
		}
	}
	cfg := loadConfig(t, filepath.Join("..", "..", "pool", "testdata", "sizeclass.json"))
	spec, err := PoolSpec(cfg)
	if want := "config 512 1048576 268435456 67108864 0 0 0 0 4 512 1024 4096 256 65536 64 1048576 16"; err != nil || spec != want {
		t.Errorf("PoolSpec = %q, %v; want %q", spec, err, want)
	}
	cfg.PassThroughSizes = []uint64{12345, 4096}
	spec, err = PoolSpec(cfg)
	if want := "config 512 1048576 268435456 67108864 0 0 0 0 4 512 1024 4096 256 65536 64 1048576 16 pass 2 12345 4096"; err != nil || spec != want {
		t.Errorf("PoolSpec with pass-through sizes = %q, %v; want %q", spec, err, want)
	}
}

// BenchmarkCPoolTrace serves the requests of each recorded trace of testdata/h200 (and the bundled
// one) that has a pool.json with the C pool, all in one timed loop of C on a bump upstream: the C
// pool's own time per request, the figure replay reports for the Go pool.
//
//	go test ./internal/intercept -run '^$' -bench CPoolTrace -benchtime 5x
func BenchmarkCPoolTrace(b *testing.B) {
	driver := buildCPoolDriver(b)
	configs, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "h200", "*.pool.json"))
	for _, cfgPath := range configs {
		name := strings.TrimSuffix(filepath.Base(cfgPath), ".pool.json")
		path := strings.TrimSuffix(cfgPath, ".pool.json") + ".arrow"
		if !fileExists(path) {
			path = filepath.Join("..", "..", "testdata", name+".arrow")
		}
		cfg := loadConfig(b, cfgPath)
		cfg.SizeClass.ArenaPaging = nil
		tr := extractTrace(b, path)
		script := cpoolConfigLine(b, cfg) + cpoolScript(b, cpoolCase{name: name, cfg: cfg, ops: tr.Ops, handles: tr.Streams})
		b.Run(name, func(b *testing.B) {
			var best float64
			for i := 0; i < b.N; i++ {
				cmd := exec.Command(driver, "-time")
				cmd.Stdin = strings.NewReader(script)
				out, err := cmd.Output()
				var ns float64
				var n int
				if _, serr := fmt.Sscanf(string(out), "ns_per_request %g requests %d", &ns, &n); err != nil || serr != nil {
					b.Fatalf("driver: %v, output %q", err, out)
				}
				if best == 0 || ns < best {
					best = ns
				}
			}
			b.ReportMetric(best, "ns/request")
			b.ReportMetric(0, "ns/op")
		})
	}
}
