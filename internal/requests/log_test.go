package requests

import (
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// logOps returns n ops and their sites: sizes, slots and streams that all differ, 97 sites.
func logOps(n int) ([]Op, []Site) {
	ops, sites := make([]Op, n), make([]Site, n)
	for i := range ops {
		ops[i] = NewOp(uint64(i)*3, uint32(i), uint32(i%5), i%11 == 0)
		sites[i] = Site{PID: uint32(i % 3), Callsite: 0x400000 + uint64(i%97)*16}
	}
	return ops, sites
}

// readAll reads l to its end, with sites or not.
func readAll(t *testing.T, l *Log, withSites bool) ([]Op, []Site) {
	t.Helper()
	r := l.Reader()
	var ops []Op
	var sites []Site
	for {
		o, s, err := r.Next(withSites)
		if errors.Is(err, io.EOF) {
			return ops, sites
		}
		if err != nil {
			t.Fatal(err)
		}
		ops, sites = append(ops, o...), append(sites, s...)
	}
}

// A log gives back exactly the ops and sites appended, in batches of any length, whether its budget
// holds every chunk, none, or the first two; read by four readers at once; the bytes spilled are
// the chunks beyond the budget, 20 bytes an op; Close gives the budget back.
func TestLogReadsBackWhatWasAppended(t *testing.T) {
	const n = 3*logChunkOps + 1234
	ops, sites := logOps(n)
	chunkBytes := uint64(logChunkOps) * 20
	for _, c := range []struct {
		budget  *Budget
		bytes   uint64 // the budget's
		spilled int64
	}{{nil, 0, 0}, {NewBudget(0), 0, n * 20}, {NewBudget(2*chunkBytes + 19), 2*chunkBytes + 19, (n - 2*logChunkOps) * 20}} {
		l := NewLog(c.budget, t.TempDir(), true)
		for start := 0; start < n; start += 7777 {
			end := min(n, start+7777)
			if err := l.Append(ops[start:end], sites[start:end]); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Finish([]uint64{10, 20}, 42); err != nil {
			t.Fatal(err)
		}
		if l.Len() != n || l.SpilledBytes() != c.spilled || l.Slots() != 42 || !slices.Equal(l.Handles(), []uint64{10, 20}) {
			t.Errorf("%d ops, %d bytes spilled (want %d), %d slots, handles %v", l.Len(), l.SpilledBytes(), c.spilled,
				l.Slots(), l.Handles())
		}
		var wg sync.WaitGroup
		for k := range 4 {
			wg.Go(func() {
				gotOps, gotSites := readAll(t, l, k%2 == 0)
				if !slices.Equal(gotOps, ops) || (k%2 == 0 && !slices.Equal(gotSites, sites)) || (k%2 == 1 && gotSites != nil) {
					t.Errorf("reader %d: %d ops, %d sites back of %d", k, len(gotOps), len(gotSites), n)
				}
			})
		}
		wg.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if c.budget != nil && c.budget.left.Load() != int64(c.bytes) {
			t.Errorf("budget left %d after Close, want %d", c.budget.left.Load(), c.bytes)
		}
	}
}

// A batch read stays valid while the next one is read, spilled or not, as forEachBatch needs.
func TestLogBatchValidUntilTheCallAfterNext(t *testing.T) {
	ops, sites := logOps(3 * logChunkOps)
	l := NewLog(NewBudget(0), t.TempDir(), true)
	if err := l.Append(ops, sites); err != nil {
		t.Fatal(err)
	}
	if err := l.Finish(nil, 0); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := l.Reader()
	prevOps, prevSites, _ := r.Next(true)
	for i := 1; ; i++ {
		o, s, err := r.Next(true)
		if !slices.Equal(prevOps, ops[(i-1)*logChunkOps:i*logChunkOps]) ||
			!slices.Equal(prevSites, sites[(i-1)*logChunkOps:i*logChunkOps]) {
			t.Fatalf("chunk %d changed while chunk %d was read", i-1, i)
		}
		if err != nil {
			break
		}
		prevOps, prevSites = o, s
	}
}

// Ops appended without sites read back with the unknown site; a log read before Finish, appended
// to after it, or spilling to a directory that does not exist says so.
func TestLogMisuseAndUnknownSites(t *testing.T) {
	ops, _ := logOps(100)
	l := NewLog(nil, "", true)
	if err := l.Append(ops, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Reader().Next(false); err == nil || err.Error() != "read of an unfinished request log" {
		t.Errorf("read before Finish: %v", err)
	}
	if err := l.Finish(nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, sites := readAll(t, l, true); len(sites) != 100 || slices.ContainsFunc(sites, func(s Site) bool { return s != Site{} }) {
		t.Errorf("sites of ops appended without: %v", sites[:3])
	}
	if err := l.Append(ops, nil); err == nil || err.Error() != "append to a finished request log" {
		t.Errorf("append after Finish: %v", err)
	}
	missing := NewLog(NewBudget(0), "/nonexistent/dir", true)
	err := missing.Append(make([]Op, logChunkOps), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "spill the request stream: open /nonexistent/dir/allocscope-requests-") {
		t.Errorf("spill to a missing directory: %v", err)
	}
	if err2 := missing.Finish(nil, 0); err2 != err {
		t.Errorf("Finish after a failed spill: %v, want %v", err2, err)
	}
}

// Decoding a trace gives the log of exactly the ops, streams, slots and counts that Extract gives,
// the sites those of AppendSites, with and without framework events, spilled or not; but for the
// sync points of events that open a batch, which become sync-only ops (folded back here).
func TestDecodeMatchesExtract(t *testing.T) {
	for _, fw := range []int{0, 7} {
		events := allFieldsVary(mixedEvents(50_000, fw))
		want, err := Extract(&eventSlice{events: events})
		if err != nil {
			t.Fatal(err)
		}
		wantOps, wantSites := foldSyncs(NewExtractor(want.Stats.Layer).AppendSites(events, nil, nil))
		for _, budget := range []*Budget{nil, NewBudget(0)} {
			l, st, err := Decode(&eventSlice{events: events}, budget, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ops, sites := foldSyncs(readAll(t, l, true))
			if !slices.Equal(ops, wantOps) || !slices.Equal(sites, wantSites) ||
				!slices.Equal(l.Handles(), want.Streams) || l.Slots() != want.Slots || st != want.Stats || len(ops) < 3000 {
				t.Errorf("framework 1 in %d: %d ops, %d streams, %d slots, %+v; Extract: %d, %d, %d, %+v", fw, len(ops),
					len(l.Handles()), l.Slots(), st, len(want.Ops), len(want.Streams), want.Slots, want.Stats)
			}
			l.Close()
		}
	}
}

// eventSlice serves events in batches of 999.
type eventSlice struct{ events []trace.Event }

func (s *eventSlice) Next() ([]trace.Event, error) {
	if len(s.events) == 0 {
		return nil, io.EOF
	}
	n := min(999, len(s.events))
	b := s.events[:n]
	s.events = s.events[n:]
	return b, nil
}

// foldSyncs moves the sync point of each sync-only op onto the op before it and drops the op and
// its site.
func foldSyncs(ops []Op, sites []Site) ([]Op, []Site) {
	var outOps []Op
	var outSites []Site
	for i, o := range ops {
		if o.Slot != NoSlot {
			outOps, outSites = append(outOps, o), append(outSites, sites[i])
		} else if n := len(outOps); n > 0 {
			outOps[n-1].stream |= syncBit
		}
	}
	return outOps, outSites
}

// A log made without sites keeps 16 bytes an op, spilled or not, and its readers return no sites.
func TestLogWithoutSites(t *testing.T) {
	ops, sites := logOps(logChunkOps + 5)
	for _, c := range []struct {
		budget  *Budget
		spilled int64
	}{{NewBudget(uint64(logChunkOps) * 16), 5 * 16}, {NewBudget(0), (logChunkOps + 5) * 16}} {
		l := NewLog(c.budget, t.TempDir(), false)
		if err := l.Append(ops, sites); err != nil {
			t.Fatal(err)
		}
		if err := l.Finish(nil, 0); err != nil {
			t.Fatal(err)
		}
		gotOps, gotSites := readAll(t, l, true)
		if !slices.Equal(gotOps, ops) || gotSites != nil || l.SpilledBytes() != c.spilled {
			t.Errorf("%d ops back, sites %v, %d bytes spilled (want %d)", len(gotOps), gotSites != nil, l.SpilledBytes(), c.spilled)
		}
		l.Close()
	}
}

func TestLogCountsAllocationsBetweenPowersOfTwo(t *testing.T) {
	l := NewLog(nil, t.TempDir(), false)
	defer l.Close()
	var ops []Op
	for _, size := range []uint64{1, 2, 3, 4096, 4097, 16384, 16385, 1 << 20, 1<<20 + 1} {
		ops = append(ops, NewOp(size, uint32(len(ops)), 0, false))
	}
	ops = append(ops, NewOp(0, 0, 0, false)) // a free: not counted
	if err := l.Append(ops, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lo, hi, want uint64
		ok           bool
	}{
		{1, 2, 1, true},             // 2
		{1, 4096, 3, true},          // 2, 3, 4096
		{4096, 16384, 2, true},      // 4097, 16384
		{16384, 1 << 20, 2, true},   // 16385, 1 MiB
		{1 << 20, 1 << 30, 1, true}, // 1 MiB + 1
		{1 << 30, 1 << 40, 0, true}, // none
		{4096, 4096, 0, false},      // not lo < hi
		{4096, 10000, 0, false},     // not a power of two
		{3, 4096, 0, false},         // not a power of two
	} {
		n, ok := l.AllocsBetween(tc.lo, tc.hi)
		if n != tc.want || ok != tc.ok {
			t.Errorf("AllocsBetween(%d, %d) = %d, %v; want %d, %v", tc.lo, tc.hi, n, ok, tc.want, tc.ok)
		}
	}
}

// A decoder refuses batches once finished or closed, instead of waiting for its stopped appender.
func TestDecoderRefusesBatchesWhenDone(t *testing.T) {
	d := NewDecoder(nil, t.TempDir())
	if err := d.Add(mixedEvents(100, 0)); err != nil {
		t.Fatal(err)
	}
	log, st, err := d.Finish()
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if log.Len() != 33 || st.Allocs != 32 { // 32 allocations and a sync-only op
		t.Errorf("log of %d ops, %d allocations; want 33, 32", log.Len(), st.Allocs)
	}
	if err := d.Add(mixedEvents(10, 0)); err == nil || err.Error() != "add to a finished or closed request decoder" {
		t.Errorf("add after finish: %v", err)
	}
	c := NewDecoder(nil, t.TempDir())
	c.Close()
	if err := c.Add(mixedEvents(10, 0)); err == nil {
		t.Error("add after close: no error")
	}
}
