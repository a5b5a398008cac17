package analysis

import (
	"testing"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// handmade is a small native trace with one of every anomaly (see the comments).
func handmade() []trace.Event {
	b := &builder{}
	b.alloc(0x1000, 1000, 5000)                                                       // 1: A
	b.alloc(0x2000, 3<<20, 20000)                                                     // 2: B, peak 3146728 bytes in 2 blocks
	b.alloc(0, 0, 1000)                                                               // 3: zero-size request, null pointer
	b.free(0x1000, 2000)                                                              // 4: free A, lifetime 3000
	b.free(0x1000, 2000)                                                              // 5: double free
	b.free(0x9000, 2000)                                                              // 6: free of an unknown address
	b.add(trace.Event{Op: trace.OpAlloc, Size: 1 << 40, Result: 2, DurationNs: 1000}) // 7: failed
	b.alloc(0x4000, 600, 4000)                                                        // 8: D (leaked)
	b.free(0x2000, 90000)                                                             // 9: free B after 7000 ns; waited for the device
	b.alloc(0x5000, 5000, 4000)                                                       // 10: E (leaked)
	b.alloc(0x6000, 70000, 4000)                                                      // 11: F (leaked)
	return b.events
}

func analyzeEvents(t *testing.T, events []trace.Event) *TraceReport {
	t.Helper()
	r, err := Analyze([]Input{fakeInput("handmade", events)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Combined
}

func TestHandmadeStatistics(t *testing.T) {
	tr := analyzeEvents(t, handmade())
	s := tr.Requests
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("events", tr.Events, uint64(11))
	check("layer", tr.RequestLayer, "device")
	check("allocs", s.Allocs, uint64(5))
	check("alloc bytes", s.AllocBytes, uint64(1000+3<<20+600+5000+70000))
	check("frees", s.Frees, uint64(2))
	check("freed bytes", s.FreedBytes, uint64(1000+3<<20))
	check("peak", s.PeakLiveBytes, uint64(3146728))
	check("peak blocks", s.PeakLiveBlocks, uint64(2))
	check("peak seq", s.PeakSeq, uint64(2))
	check("peak time", s.PeakTimeNs, int64(2000))
	check("end live", s.EndLiveBytes, uint64(75600))
	check("wall", s.WallNs, int64(9000+90000-1000)) // the free of B ends last
	check("call ns", s.CallNs, int64(5000+20000+1000+2000*3+1000+4000+90000+4000+4000))
	check("lifetime count", s.Lifetime.Count, uint64(2))
	check("lifetime min", s.Lifetime.Min, 3000.0)
	check("lifetime max", s.Lifetime.Max, 7000.0)
	check("median free", s.MedianFreeNs, int64(2000))
	check("waited threshold", s.WaitedFreeNs, int64(8192))
	check("waited", s.WaitedFrees, uint64(1))
	wantHist := [][3]uint64{{512, 2, 1600}, {4096, 1, 5000}, {65536, 1, 70000}, {2 << 20, 1, 3 << 20}}
	if len(s.Histogram) != len(wantHist) {
		t.Fatalf("histogram %+v", s.Histogram)
	}
	for i, w := range wantHist {
		h := s.Histogram[i]
		if h.Lo != w[0] || h.Hi != 2*w[0] || h.Count != w[1] || h.Bytes != w[2] {
			t.Errorf("histogram[%d] = %+v, want lo %d count %d bytes %d", i, h, w[0], w[1], w[2])
		}
	}
	if len(tr.Groups) != 1 || tr.Groups[0].PID != 100 || tr.Groups[0].PeakLiveBytes != 3146728 {
		t.Errorf("groups = %+v", tr.Groups)
	}
}

func TestHandmadeAnomalies(t *testing.T) {
	a := analyzeEvents(t, handmade()).Anomalies
	for _, c := range []struct {
		name         string
		count, bytes uint64
		seqs         []uint64
	}{
		{"leaks", a.Leaks.Count, a.Leaks.Bytes, seqs(a.Leaks.Events)},
		{"double", a.DoubleFrees.Count, a.DoubleFrees.Bytes, seqs(a.DoubleFrees.Events)},
		{"unknown", a.UnknownFrees.Count, a.UnknownFrees.Bytes, seqs(a.UnknownFrees.Events)},
		{"failed", a.FailedAllocs.Count, a.FailedAllocs.Bytes, seqs(a.FailedAllocs.Events)},
		{"zero", a.ZeroSize.Count, a.ZeroSize.Bytes, seqs(a.ZeroSize.Events)},
	} {
		want := map[string]struct {
			count, bytes uint64
			seqs         []uint64
		}{
			"leaks":   {3, 75600, []uint64{8, 10, 11}},
			"double":  {1, 0, []uint64{5}},
			"unknown": {1, 0, []uint64{6}},
			"failed":  {1, 1 << 40, []uint64{7}},
			"zero":    {1, 0, []uint64{3}},
		}[c.name]
		if c.count != want.count || c.bytes != want.bytes || !equal(c.seqs, want.seqs) {
			t.Errorf("%s: count %d bytes %d seqs %v, want %d %d %v", c.name, c.count, c.bytes, c.seqs,
				want.count, want.bytes, want.seqs)
		}
	}
	leak := a.Leaks.Events[0]
	if leak.Function != "cudaMalloc" || leak.Callsite != "0x400000" || leak.Address != "0x4000" || leak.Size != 600 {
		t.Errorf("first leak = %+v", leak)
	}
}

func seqs(refs []EventRef) []uint64 {
	var out []uint64
	for _, r := range refs {
		out = append(out, r.Seq)
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestArenaShrunkToSingleRegion: the fragmenting trace of whatif.TestFitArena gets a 10 MiB arena
// placing blocks best-aged (the smallest single region that serves it, to 2 MiB, of either
// placement; best fit would need 14 MiB), not the 16 MiB a growing best-fit arena reaches.
func TestArenaShrunkToSingleRegion(t *testing.T) {
	b := &builder{}
	b.alloc(0x1000, 4<<20, 0).alloc(0x2000, 4<<20, 0).free(0x1000, 0).alloc(0x3000, 6<<20, 0)
	tr := analyzeEvents(t, b.events)
	p := tr.SizeClasses
	if p.LargePeakLiveBytes != 10<<20 || p.ArenaBytes != 10<<20 || len(p.Classes) != 0 {
		t.Fatalf("plan: large peak %d arena %d classes %v", p.LargePeakLiveBytes, p.ArenaBytes, p.Classes)
	}
	rec := tr.Simulations[0]
	if rec.Name != "recommended" || rec.PeakReservedBytes != 10<<20 || rec.Fallbacks != 0 || rec.Failures != 0 ||
		rec.Settings != "0 classes ≤ 1 MiB, arena 10 MiB best-aged" {
		t.Errorf("recommended simulation = %+v", rec)
	}
}

// TestVirtualMemoryRequests: a program that gets its memory through the virtual-memory API
// (reserve address space, create physical memory, map it) is analyzed by its cuMemCreate and
// cuMemRelease calls; reservations and mappings are not requests.
func TestVirtualMemoryRequests(t *testing.T) {
	const mib = 1 << 20
	b := &builder{}
	vmm := func(op trace.Op, fn string, addr, size, handle uint64, dur int64) {
		b.add(trace.Event{Op: op, Memory: trace.MemoryVirtual, Layer: trace.LayerDriver, Function: fn,
			Address: addr, Size: size, Handle: handle, DurationNs: dur})
	}
	vmm(trace.OpReserve, "cuMemAddressReserve", 0x7f0000000000, 64*mib, 0, 100)
	vmm(trace.OpCreate, "cuMemCreate", 0x11, 2*mib, 0, 3000)
	vmm(trace.OpMap, "cuMemMap", 0x7f0000000000, 2*mib, 0x11, 200)
	vmm(trace.OpCreate, "cuMemCreate", 0x12, 20*mib, 0, 9000)
	vmm(trace.OpMap, "cuMemMap", 0x7f0000200000, 20*mib, 0x12, 200)
	vmm(trace.OpUnmap, "cuMemUnmap", 0x7f0000000000, 2*mib, 0, 300)
	vmm(trace.OpRelease, "cuMemRelease", 0x11, 2*mib, 0, 4000)
	vmm(trace.OpCreate, "cuMemCreate", 0x13, 2*mib, 0, 3000)
	tr := analyzeEvents(t, b.events)
	s := tr.Requests
	if s.Allocs != 3 || s.AllocBytes != 24*mib || s.Frees != 1 || s.FreedBytes != 2*mib ||
		s.PeakLiveBytes != 22*mib || s.PeakLiveBlocks != 2 || s.EndLiveBytes != 22*mib {
		t.Errorf("requests = %+v, want 3 allocs of 24 MiB, 1 free of 2 MiB, peak 22 MiB in 2 blocks", s)
	}
	if s.CallNs != 19800 { // every memory call counts, reservations and mappings too
		t.Errorf("time in calls %d ns, want 19800", s.CallNs)
	}
	if l := tr.Anomalies.Leaks; l.Count != 2 || l.Bytes != 22*mib {
		t.Errorf("leaks = %d blocks %d bytes, want 2 blocks of 22 MiB", l.Count, l.Bytes)
	}
	raw := 0
	for _, sim := range tr.Simulations {
		if sim.Name == "raw" {
			raw++
			if sim.PeakReservedBytes != 22*mib || sim.UpstreamReserves != 3 || sim.UpstreamReleases != 1 {
				t.Errorf("raw simulation: peak reserved %d, reserves %d, releases %d; want 22 MiB, 3, 1",
					sim.PeakReservedBytes, sim.UpstreamReserves, sim.UpstreamReleases)
			}
		}
	}
	if raw != 1 {
		t.Errorf("%d raw simulations, want 1", raw)
	}
}

// TestPerStreamRecommendation: with requests on two streams the recommended pool keeps freed
// blocks per stream, and its slots are counted that way: the block freed on stream 7 cannot serve
// the request on stream 9, so the class needs two slots although one block is live at a time.
func TestPerStreamRecommendation(t *testing.T) {
	b := &builder{}
	on := func(op trace.Op, addr, size, stream uint64) {
		b.add(trace.Event{Op: op, Address: addr, Size: size, Stream: stream, DurationNs: 1000})
	}
	on(trace.OpAlloc, 0x1000, 1000, 7)
	on(trace.OpFree, 0x1000, 0, 7)
	on(trace.OpAlloc, 0x2000, 1000, 9)
	on(trace.OpFree, 0x2000, 0, 9)
	on(trace.OpAlloc, 0x1000, 1000, 7)
	on(trace.OpFree, 0x1000, 0, 7)
	tr := analyzeEvents(t, b.events)
	sc := tr.Config.SizeClass
	if !sc.PerStream || len(sc.Classes) != 1 || sc.Classes[0] != (pool.Class{Size: 1024, Slots: 2}) {
		t.Errorf("per stream %v, classes %+v; want per stream, one class of 1024 B with 2 slots", sc.PerStream, sc.Classes)
	}
	rec := tr.Simulations[0]
	if rec.Name != "recommended" || rec.Fallbacks != 0 || rec.PeakReservedBytes != 2048 ||
		rec.Settings != "1 classes ≤ 1 MiB, arena 0 B, per stream" {
		t.Errorf("recommended simulation = %+v; want no fallbacks, 2048 B reserved", rec)
	}
	// One stream: per-stream lists change nothing and stay off. So they do with the legacy
	// default stream (cudaMalloc) and one stream of stream-ordered requests.
	if analyzeEvents(t, handmade()).Config.SizeClass.PerStream {
		t.Error("single-stream trace: per_stream recommended")
	}
	b = &builder{}
	on(trace.OpAlloc, 0x1000, 1000, 0)
	on(trace.OpFree, 0x1000, 0, 0)
	on(trace.OpAlloc, 0x2000, 1000, 9)
	on(trace.OpFree, 0x2000, 0, 9)
	if analyzeEvents(t, b.events).Config.SizeClass.PerStream {
		t.Error("legacy stream and one other: per_stream recommended")
	}
}

// TestRecordPoolPrediction: under record --pool a block freed by cudaFree waits for a
// synchronization. A loop of 8 cudaMalloc/cudaFree pairs of 4 KiB needs one slot: every allocation
// after the first finds the slot deferred and synchronizes (7 syncs). With --pool-headroom 4 the
// class has 4 slots: the pool synchronizes only when all 4 are deferred (at the fifth allocation:
// 1 sync), for 4 times the memory; replay's prediction (frees at once) grows with it.
func TestRecordPoolPrediction(t *testing.T) {
	b := &builder{}
	for i := range 8 {
		b.alloc(0x1000+uint64(i), 4096, 0).free(0x1000+uint64(i), 0)
	}
	for _, tc := range []struct {
		headroom float64
		slots    uint64
		reserved uint64
		syncs    uint64
	}{{1, 1, 4096, 7}, {4, 4, 16384, 1}} {
		r, err := Analyze([]Input{fakeInput("loop", b.events)}, Options{PoolHeadroom: tc.headroom})
		if err != nil {
			t.Fatal(err)
		}
		cfg := r.Combined.Config
		p := cfg.Prediction
		if got := cfg.SizeClass.Classes; len(got) != 1 || got[0].Slots != tc.slots || p.PeakReservedBytes != tc.reserved ||
			p.RecordPool == nil || *p.RecordPool != (pool.DeferredPrediction{PeakReservedBytes: tc.reserved, Syncs: tc.syncs}) {
			t.Errorf("headroom %g: classes %+v, prediction %+v, record --pool %+v; want %d slots, %d bytes, %d syncs",
				tc.headroom, got, p, p.RecordPool, tc.slots, tc.reserved, tc.syncs)
		}
	}
}

// TestRanksSharePool: two ranks, one holding 3 blocks of 4 KiB at once, the other 5 and a 2 MiB
// block. The pool for every rank has the combined analysis' class with 5 slots and a 2 MiB arena;
// each rank runs on it without growth; rank1 has the highest peak and the most time in its calls;
// it is the pool.json --emit-config writes.
func TestRanksSharePool(t *testing.T) {
	r0, r1 := &builder{}, &builder{}
	for i := range uint64(3) {
		r0.alloc(0x1000*(i+1), 4096, 1000)
	}
	for i := range uint64(5) {
		r1.alloc(0x1000*(i+1), 4096, 2000)
	}
	r1.alloc(0x100000, 2<<20, 5000)
	r, err := Analyze([]Input{fakeInput("rank0", r0.events), fakeInput("rank1", r1.events)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rk := r.Ranks
	if rk == nil || rk.Config == nil || !rk.Fits || rk.HighestPeak != "rank1" || rk.MostCallTime != "rank1" ||
		rk.MostFallbacks != "" || len(rk.Rows) != 2 {
		t.Fatalf("ranks %+v", rk)
	}
	sc := rk.Config.SizeClass
	if len(sc.Classes) != 1 || sc.Classes[0].Size != 4096 || sc.Classes[0].Slots != 5 || sc.ArenaBytes != 2<<20 {
		t.Errorf("pool for every rank: classes %+v, arena %d; want 5 slots of 4 KiB and 2 MiB", sc.Classes, sc.ArenaBytes)
	}
	if r0 := rk.Rows[0]; r0.SharedReserved != 5*4096+2<<20 || r0.SharedFallbacks != 0 || r0.PeakLiveBytes != 3*4096 {
		t.Errorf("rank0 row %+v", r0)
	}
	if Config(r) != rk.Config {
		t.Errorf("Config(r) is not the pool for every rank")
	}
}
