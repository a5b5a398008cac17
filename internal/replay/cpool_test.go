package replay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/intercept/cpool"
	"github.com/allocscope/allocscope/internal/replay/backend/host"
	"github.com/allocscope/allocscope/pool"
)

// cpoolCase is a trace and a size-class pool.json to replay in the pool and cpool modes.
type cpoolCase struct {
	name string
	tr   *Trace
	cfg  pool.Config
}

// cpoolCases are the traces replay's tests use with a size-class pool.json each: the real traces
// with their own (a paged arena made fixed, without its prediction: the C pool has none), the small
// trace and random ones.
func cpoolCases(t testing.TB) []cpoolCase {
	var cs []cpoolCase
	for _, rt := range realTraces {
		tr, cfg := loadRealTrace(t, rt.trace, rt.config)
		if cfg.SizeClass.ArenaPaging != nil { // its prediction is the paged arena's
			cfg.SizeClass.ArenaPaging, cfg.Prediction = nil, nil
		}
		cs = append(cs, cpoolCase{rt.name, tr, cfg})
	}
	for _, name := range []string{"sizeclass", "sizeclass-per-stream"} {
		cfg := propertyConfigs()[name]
		cs = append(cs, cpoolCase{"small/" + name, smallTrace().extract(t), cfg})
		for seed := range uint64(3) {
			tr := randomTrace(rand.New(rand.NewPCG(seed, 7)), 2000).extract(t)
			cs = append(cs, cpoolCase{fmt.Sprintf("random%d/%s", seed, name), tr, cfg})
		}
	}
	return cs
}

// TestCPoolModeIsPoolMode replays every case in the pool and cpool modes on the host backend with
// --verify: the C pool that record --pool deploys does exactly what package pool does (its counters
// in the first repetition, now and at peak reserved memory; peak reserved memory, upstream
// reserves, fallbacks and failures), the engine counts the same requests and latencies for both,
// and every check passes.
func TestCPoolModeIsPoolMode(t *testing.T) {
	if !cpool.Available {
		t.Skip("the C pool needs cgo")
	}
	h := host.New(1 << 44)
	defer h.Close()
	for _, c := range cpoolCases(t) {
		rep, err := Run(c.tr, h, c.cfg, Options{Modes: []Mode{ModePool, ModeCPool}, Repeat: 2, Verify: true, MaxOverhead: 1e9})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !rep.Passed {
			t.Errorf("%s: failed %+v", c.name, rep.Failed())
		}
		p, cp := rep.Mode(ModePool), rep.Mode(ModeCPool)
		got := [...]uint64{cp.Allocs, cp.Frees, cp.FinalFrees, cp.Failures, cp.TimedFailures, cp.PeakReservedBytes,
			cp.UpstreamReserves, cp.UpstreamReleases, cp.Fallbacks, cp.PeakLiveBytes, cp.VerifyChecks, cp.Alloc.Count, cp.Free.Count}
		want := [...]uint64{p.Allocs, p.Frees, p.FinalFrees, p.Failures, p.TimedFailures, p.PeakReservedBytes,
			p.UpstreamReserves, p.UpstreamReleases, p.Fallbacks, p.PeakLiveBytes, p.VerifyChecks, p.Alloc.Count, p.Free.Count}
		if got != want || *cp.PoolStats != *p.PoolStats || *cp.PoolPeakStats != *p.PoolPeakStats {
			t.Errorf("%s: cpool %v\n  stats %+v\n  peak %+v\npool %v\n  stats %+v\n  peak %+v", c.name, got, *cp.PoolStats,
				*cp.PoolPeakStats, want, *p.PoolStats, *p.PoolPeakStats)
		}
		if cp.Allocs != 2*c.tr.Stats.Allocs || cp.VerifyChecks != cp.Allocs || cp.AllocatorTimeNs <= 0 || cp.ClockedTimeNs <= 0 {
			t.Errorf("%s: cpool allocs %d, verified %d, allocator time %d ns, clocked %d ns; trace allocs %d", c.name,
				cp.Allocs, cp.VerifyChecks, cp.AllocatorTimeNs, cp.ClockedTimeNs, c.tr.Stats.Allocs)
		}
	}
	if free, total, _ := h.MemGetInfo(); free != total {
		t.Errorf("the host backend still maps %d bytes", total-free)
	}
}

// A request the C pool cannot serve (a capped arena) is the request pool mode fails, in the same
// line of the report; the same-pool check still passes, and the allocation check fails for both.
func TestCPoolModeReportsFailedRequests(t *testing.T) {
	if !cpool.Available {
		t.Skip("the C pool needs cgo")
	}
	h := host.New(1 << 40)
	defer h.Close()
	cfg := propertyConfigs()["sizeclass"]
	cfg.SizeClass.ArenaBytes, cfg.BestFit = 1<<20, &pool.BestFitConfig{GrowBytes: 1 << 20, MaximumBytes: 2 << 20}
	tr := randomTrace(rand.New(rand.NewPCG(5, 7)), 2000).extract(t)
	rep, err := Run(tr, h, cfg, Options{Modes: []Mode{ModePool, ModeCPool}, Verify: true, MaxOverhead: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	p, cp := rep.Mode(ModePool), rep.Mode(ModeCPool)
	if cp.Failures == 0 || cp.Failures != p.Failures || cp.OOMs != p.Failures || cp.TimedFailures != p.TimedFailures {
		t.Fatalf("failures: cpool %d (%d out of memory, %d timed), pool %d (%d timed)", cp.Failures, cp.OOMs,
			cp.TimedFailures, p.Failures, p.TimedFailures)
	}
	for i, line := range cp.Errors {
		// "timed repetition 1, request 812: alloc 1637563 bytes: " and why, in the words of each pool
		prefix := line[:strings.Index(line, "bytes: ")]
		if !strings.HasPrefix(p.Errors[i], prefix) || !strings.HasSuffix(line, ": arena at its maximum: out of memory") {
			t.Errorf("cpool: %q\npool:  %q", line, p.Errors[i])
		}
	}
	failed := map[string]bool{}
	for _, c := range rep.Failed() {
		failed[c.Name] = true
	}
	if len(failed) != 2 || !failed["pool: every allocation succeeded"] || !failed["cpool: every allocation succeeded"] {
		t.Errorf("failed checks %v, want the two allocation checks", failed)
	}
}

// --touch cannot run inside the one call into C: its check is skipped, with the reason, and the
// C pool's blocks are never written.
func TestCPoolModeSkipsTouch(t *testing.T) {
	if !cpool.Available {
		t.Skip("the C pool needs cgo")
	}
	h := host.New(1 << 30)
	defer h.Close()
	rep, err := Run(smallTrace().extract(t), h, propertyConfigs()["sizeclass"], Options{Modes: []Mode{ModeRaw, ModeCPool},
		Touch: true, MaxOverhead: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	want := Check{Name: "cpool: touch: every block kept its pattern", Status: CheckSkip,
		Detail: "the C pool serves the whole trace in one call into C: no block can be written between its requests"}
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
		if strings.HasPrefix(c.Name, "cpool: touch") && c != want {
			t.Errorf("check %+v, want %+v", c, want)
		}
	}
	if !rep.Passed || rep.Mode(ModeCPool).Touched != 0 || rep.Mode(ModeRaw).Touched != 4 || !strings.Contains(strings.Join(names, "\n"), want.Name) {
		t.Errorf("passed %v (failed %+v), touched cpool %d raw %d, checks %q", rep.Passed, rep.Failed(),
			rep.Mode(ModeCPool).Touched, rep.Mode(ModeRaw).Touched, names)
	}
}

// The cpool mode refuses, before replaying anything, a config the C pool does not implement: in
// the words of record --pool.
func TestCPoolModeRefusesConfig(t *testing.T) {
	h := host.New(1 << 30)
	defer h.Close()
	_, err := Run(smallTrace().extract(t), h, bestFitConfig(), Options{Modes: []Mode{ModePool, ModeCPool}})
	want := `mode cpool: policy "bestfit": the pool inside the program implements "sizeclass" only (analyze --emit-config writes one)`
	if !cpool.Available {
		want = "mode cpool: " + cpool.ErrNeedsCgo.Error()
	}
	if err == nil || err.Error() != want {
		t.Errorf("Run = %v, want %q", err, want)
	}
	if err := CheckConfig(bestFitConfig(), []Mode{ModePool, ModeCPool}); err == nil || err.Error() != want {
		t.Errorf("CheckConfig = %v, want %q", err, want)
	}
	if err := CheckConfig(bestFitConfig(), DefaultModes); err != nil {
		t.Errorf("CheckConfig without the cpool mode = %v, want nil", err)
	}
}

// The text report of a replay with the cpool mode: the speedups of the C pool and the prediction
// next to both pools.
func TestCPoolTextReport(t *testing.T) {
	stats := &pool.Stats{UpstreamReserves: 1}
	rep := &Report{Repeat: 1, RecordedNsPerRequest: 15300, SpeedupRecordedOverPool: 150, SpeedupRecordedOverCPool: 300,
		SpeedupRawOverPool: 100, SpeedupAsyncOverPool: 10, SpeedupRawOverCPool: 200, SpeedupAsyncOverCPool: 20,
		SpeedupPoolOverCPool: 2, Prediction: &pool.Prediction{PeakReservedBytes: 1 << 20, UpstreamCalls: 1},
		Modes: []ModeResult{{Mode: ModePool, PeakReservedBytes: 1 << 20, PoolStats: stats},
			{Mode: ModeCPool, PeakReservedBytes: 1 << 20, PoolStats: stats}}}
	var b bytes.Buffer
	if err := WriteText(&b, rep, "t.arrow", "pool.json"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`
speedup of the pool (allocator time): 100 x over raw, 10 x over async
speedup of the C pool, cpool (allocator time): 200 x over raw, 20 x over async, 2 x over pool
the program's own calls took 15.3 µs per request as recorded (device waits inside cudaFree
  included): 150 x the pool's time, 300 x the C pool's
`, `
prediction of analyze (pool.json) vs measured in the pool and cpool modes:
                          predicted               pool              cpool
   peak reserved  1 MiB (1048576 B)  1 MiB (1048576 B)  1 MiB (1048576 B)
       peak live                0 B                0 B                0 B
  upstream calls                  1                  1                  1
       fallbacks                  0                  0                  0
        failures                  0                  0                  0
`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// BenchmarkCPoolVersusPool replays each real trace through the engine on the host backend in the
// pool and cpool modes, interleaved, 5 repetitions per run: pool-ns/request and cpool-ns/request
// are each mode's allocator time per request (the timed passes' median, then the mean over the
// benchmark's runs), pool-mean-ns and cpool-mean-ns their mean alloc+free latency.
//
//	go test ./internal/replay -run '^$' -bench CPoolVersusPool -benchtime 10x
func BenchmarkCPoolVersusPool(b *testing.B) {
	if !cpool.Available {
		b.Skip("the C pool needs cgo")
	}
	for _, c := range cpoolCases(b)[:len(realTraces)] {
		b.Run(c.name, func(b *testing.B) {
			h := host.New(1 << 44)
			defer h.Close()
			var sum [2]float64
			var lat [2]float64
			for b.Loop() {
				rep, err := Run(c.tr, h, c.cfg, Options{Modes: []Mode{ModePool, ModeCPool}, Repeat: 5, MaxOverhead: 1e9})
				if err != nil {
					b.Fatal(err)
				}
				for i, m := range []Mode{ModePool, ModeCPool} {
					r := rep.Mode(m)
					sum[i] += float64(r.AllocatorTimeNs) / float64(c.tr.Stats.Allocs+c.tr.Stats.Frees)
					lat[i] += (r.Alloc.MeanNs*float64(r.Alloc.Count) + r.Free.MeanNs*float64(r.Free.Count)) /
						float64(r.Alloc.Count+r.Free.Count)
				}
			}
			n := float64(b.N)
			b.ReportMetric(sum[0]/n, "pool-ns/request")
			b.ReportMetric(sum[1]/n, "cpool-ns/request")
			b.ReportMetric(lat[0]/n, "pool-mean-ns")
			b.ReportMetric(lat[1]/n, "cpool-mean-ns")
			b.ReportMetric(0, "ns/op")
		})
	}
}
