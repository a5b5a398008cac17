package stats

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/slots"
	"github.com/allocscope/allocscope/trace"
)

const (
	maxExamples = 5
	// freedSlots is the size of the direct-mapped table of recently freed blocks that tells
	// double frees from frees of unknown addresses: a freed block is remembered until another
	// freed block hashes to its slot.
	freedSlots = 1 << 16
)

// Key identifies a block: its process, device and address.
type Key struct {
	PID    uint32
	Device int32
	Addr   uint64
}

// KeyOf returns the block key of an event.
func KeyOf(e *trace.Event) Key { return Key{e.PID, e.Device, e.Address} }

type liveBlock struct {
	seq      uint64
	time     int64
	size     uint64
	callsite uint64
	group    int32
	sizeIdx  int32
	site     int32 // index in the tracker's siteTable
	fn       uint16
	kept     bool // the detail timeline keeps this allocation: its free gives the lifetime
}

type groupKey struct {
	pid    uint32
	device int32
	stream uint64
}

type anomaly struct {
	count  uint64
	bytes  uint64
	events []schema.EventRef
}

func (a *anomaly) add(ref schema.EventRef, bytes uint64) {
	a.count++
	a.bytes += bytes
	if len(a.events) < maxExamples {
		a.events = append(a.events, ref)
	}
}

func (a *anomaly) result() schema.Anomaly {
	return schema.Anomaly{Count: a.count, Bytes: a.bytes, Events: append([]schema.EventRef{}, a.events...)}
}

// tracker follows the blocks of one layer (framework requests, or native calls).
type tracker struct {
	fns          *interner
	live         Table[int32]                  // block key → index in blocks
	blocks       slots.Table[liveBlock, int32] // live blocks, by index, so the table's slots stay small
	freed        []Key                         // direct-mapped by hash
	overall      *tally
	groups       []*tally
	groupIdx     map[groupKey]int32
	lastKey      groupKey
	lastIdx      int32
	sizes        *sizeTable
	sites        *siteTable
	timeline     Timeline
	detail       *detailTimeline // the HTML report's timeline, when kept
	leaks        anomaly
	doubleFrees  anomaly
	unknownFrees anomaly
	failed       anomaly
	zeroSize     anomaly
	events       uint64
	thresholds   []uint64 // sizes above thresholds[i] are large for candidate i
	largeLive    []uint64
	largePeak    []uint64
	ascending    bool // thresholds ascend: a size not above one is not above the later ones
	split        bool // groups have tallies of their own (see tallyOf)
}

func newTracker(fns *interner, thresholds []uint64) *tracker {
	return &tracker{fns: fns, thresholds: thresholds, largeLive: make([]uint64, len(thresholds)),
		largePeak: make([]uint64, len(thresholds)), ascending: slices.IsSorted(thresholds),
		overall:  &tally{lifetime: NewSketch(overallSketchCap), freeDur: NewSketch(overallSketchCap)},
		groupIdx: make(map[groupKey]int32), lastIdx: -1, sizes: newSizeTable(), sites: newSiteTable()}
}

func (t *tracker) group(e *trace.Event) int32 {
	if t.lastIdx < 0 || e.Stream != t.lastKey.stream || e.PID != t.lastKey.pid || e.Device != t.lastKey.device {
		return t.newGroup(groupKey{e.PID, e.Device, e.Stream})
	}
	return t.lastIdx
}

// newGroup returns the index of the group of k, which is not the last group seen.
func (t *tracker) newGroup(k groupKey) int32 {
	i, ok := t.groupIdx[k]
	if !ok {
		if len(t.groups) == 1 {
			t.materialize()
		}
		i = int32(len(t.groups))
		g := newTally(groupSketchCap)
		g.pid, g.device, g.stream = k.pid, k.device, k.stream
		t.groups = append(t.groups, g)
		t.groupIdx[k] = i
	}
	t.lastKey, t.lastIdx = k, i
	return i
}

func (t *tracker) ref(e *trace.Event) schema.EventRef {
	return schema.EventRef{Seq: e.Seq, TimeNs: e.TimeNs, PID: e.PID, Device: e.Device,
		Function: e.Function, Size: e.Size, Address: fmt.Sprintf("%#x", e.Address),
		Callsite: t.fns.callsite(e.PID, e.Callsite), Result: e.Result}
}

func tracked(m trace.Memory) bool { return m == trace.MemoryDevice || m == trace.MemoryManaged }

// add processes one event of this tracker's layer. It returns the interned id of the event's
// function when it needed it, else -1.
func (t *tracker) add(e *trace.Event) int32 {
	t.events++
	g := t.tallyOf(t.group(e)) // before overall.see: group may clone it
	t.overall.see(e)
	switch e.Request() {
	case trace.RequestAlloc:
		return t.alloc(e, g)
	case trace.RequestFree:
		t.free(e)
		return -1
	}
	g.see(e)
	if e.Op == trace.OpOOM && tracked(e.Memory) {
		t.failed.add(t.ref(e), e.Size)
	}
	return -1
}

// alloc processes an allocation; it returns the id of its function when it interned it, else -1.
func (t *tracker) alloc(e *trace.Event, g *tally) int32 {
	g.see(e)
	if !e.OK() {
		t.failed.add(t.ref(e), e.Size)
		return -1
	}
	if e.Size == 0 {
		t.zeroSize.add(t.ref(e), 0)
	}
	if e.Address == 0 || e.Size == 0 && t.isLive(KeyOf(e)) {
		// A 0-byte allocation at the address of a live block holds nothing and frees nothing: the
		// block stays live, as in the request stream (requests.PeakLive), which skips 0-byte requests.
		return -1
	}
	si := t.sizes.lookup(e.Size)
	fn := t.fns.id(e.Function)
	bi := t.blocks.Put(liveBlock{seq: e.Seq, time: e.TimeNs, size: e.Size,
		callsite: e.Callsite, group: t.lastIdx, sizeIdx: si, site: t.sites.alloc(e.PID, e.Callsite, e.Size, e.Seq, fn), fn: fn})
	old, replaced := t.live.Put(KeyOf(e), bi)
	if replaced {
		// The address was handed out again without a free in between: the old block's free
		// was not recorded. Count it as freed now so live bytes stay right.
		t.release(e, *t.blocks.At(old))
		t.blocks.Release(old)
	}
	t.sizes.alloc(si)
	g.countSize(si)
	for i, th := range t.thresholds {
		if e.Size > th {
			t.largeLive[i] += e.Size
			t.largePeak[i] = max(t.largePeak[i], t.largeLive[i])
		} else if t.ascending {
			break
		}
	}
	g.alloc(e)
	peak := t.overall.peak
	t.overall.alloc(e)
	if t.overall.peak != peak {
		t.sizes.snapshot()
		t.sites.snapshot()
	}
	t.timeline.Add(e.TimeNs, t.overall.live)
	if t.detail != nil {
		t.detail.alloc(e, t.overall.live)
	}
	return int32(fn)
}

func (t *tracker) free(e *trace.Event) {
	k := KeyOf(e)
	var bi int32
	var ok bool
	if e.OK() {
		bi, ok = t.live.Delete(k)
	} else {
		bi, ok = t.live.Get(k)
	}
	if !ok {
		t.tallyOf(t.lastIdx).see(e)
		if !e.OK() || e.Address == 0 {
			return
		}
		if t.wasFreed(k) {
			t.doubleFrees.add(t.ref(e), e.Size)
		} else {
			t.unknownFrees.add(t.ref(e), e.Size)
		}
		return
	}
	b := *t.blocks.At(bi)
	g := t.tallyOf(b.group)
	g.see(e)
	if !e.OK() {
		return
	}
	t.blocks.Release(bi)
	t.remember(k)
	t.sizes.free(b.sizeIdx)
	t.sites.free(b.site, b.size)
	t.dropLarge(b.size)
	g.free(e, &b)
	t.overall.free(e, &b)
	t.timeline.Add(e.TimeNs, t.overall.live)
	if t.detail != nil {
		t.detail.free(e, &b, t.overall.live)
	}
}

// isLive reports whether a block is live at k.
func (t *tracker) isLive(k Key) bool {
	_, ok := t.live.Get(k)
	return ok
}

// keep marks the live block of an allocation the detail timeline keeps, so that its free tells it.
func (t *tracker) keep(k Key, seq uint64) {
	if bi, ok := t.live.Get(k); ok {
		if b := t.blocks.At(bi); b.seq == seq {
			b.kept = true
		}
	}
}

// release drops a block whose free was never seen.
func (t *tracker) release(e *trace.Event, b liveBlock) {
	if g := t.tallyOf(b.group); g != nil {
		g.live -= b.size
		g.liveBlocks--
	}
	t.overall.live -= b.size
	t.overall.liveBlocks--
	t.sizes.free(b.sizeIdx)
	t.sites.free(b.site, b.size)
	t.dropLarge(b.size)
}

func freedSlot(k Key) uint64 {
	h := (k.Addr>>9 ^ uint64(k.PID)<<20 ^ uint64(uint32(k.Device))<<40) * 0x9e3779b97f4a7c15
	return h >> (64 - 16)
}

func (t *tracker) remember(k Key) {
	if t.freed == nil {
		t.freed = make([]Key, freedSlots)
	}
	t.freed[freedSlot(k)] = k
}

func (t *tracker) wasFreed(k Key) bool {
	return t.freed != nil && t.freed[freedSlot(k)] == k
}

type leak struct {
	k Key
	b liveBlock
}

// byAge orders leaks by seq, then time, process, device and address (merged traces may repeat seqs).
func byAge(x, y leak) int {
	return cmp.Or(cmp.Compare(x.b.seq, y.b.seq), cmp.Compare(x.b.time, y.b.time), cmp.Compare(x.k.PID, y.k.PID),
		cmp.Compare(x.k.Device, y.k.Device), cmp.Compare(x.k.Addr, y.k.Addr))
}

// finishLeaks records the blocks still live as leaks, the oldest first.
func (t *tracker) finishLeaks() {
	var oldest []leak
	t.live.All(func(k Key, bi int32) {
		b := *t.blocks.At(bi)
		t.leaks.count++
		t.leaks.bytes += b.size
		oldest = append(oldest, leak{k, b})
		if len(oldest) > 4*maxExamples {
			slices.SortFunc(oldest, byAge)
			oldest = oldest[:maxExamples]
		}
	})
	slices.SortFunc(oldest, byAge)
	for i := 0; i < len(oldest) && i < maxExamples; i++ {
		t.leaks.events = append(t.leaks.events, t.leakRef(oldest[i]))
	}
	t.oldestPerSite()
}

// leakRef is the report's reference to a block live at the end.
func (t *tracker) leakRef(l leak) schema.EventRef {
	return schema.EventRef{Seq: l.b.seq, TimeNs: l.b.time, PID: l.k.PID, Device: l.k.Device,
		Function: t.fns.name(l.b.fn), Size: l.b.size, Address: fmt.Sprintf("%#x", l.k.Addr),
		Callsite: t.fns.callsite(l.k.PID, l.b.callsite)}
}

// oldestPerSite keeps, for each callsite, its oldest blocks live at the end (SiteSummary.Oldest).
func (t *tracker) oldestPerSite() {
	perSite := map[int32][]leak{}
	t.live.All(func(k Key, bi int32) {
		b := *t.blocks.At(bi)
		l := append(perSite[b.site], leak{k, b})
		if len(l) > 4*maxExamples {
			slices.SortFunc(l, byAge)
			l = l[:maxExamples]
		}
		perSite[b.site] = l
	})
	for site, l := range perSite {
		slices.SortFunc(l, byAge)
		for i := 0; i < len(l) && i < maxExamples; i++ {
			t.sites.tallies[site].oldest = append(t.sites.tallies[site].oldest, t.leakRef(l[i]))
		}
	}
}

func (t *tracker) anomalies() schema.Anomalies {
	return schema.Anomalies{Leaks: t.leaks.result(), DoubleFrees: t.doubleFrees.result(),
		UnknownFrees: t.unknownFrees.result(), FailedAllocs: t.failed.result(), ZeroSize: t.zeroSize.result()}
}

func (t *tracker) dropLarge(size uint64) {
	for i, th := range t.thresholds {
		if size > th {
			t.largeLive[i] -= size
		} else if t.ascending {
			break
		}
	}
}

// medianFree returns the median duration of the frees of this layer (0 when unknown).
func (t *tracker) medianFree() int64 { return int64(t.overall.freeDur.Quantile(0.5)) }

// tallyOf returns the tally of group i, or nil while the tracker has seen only one group: the
// group's tally then equals the overall one and is cloned from it when needed (materialize).
func (t *tracker) tallyOf(i int32) *tally {
	if len(t.groups) == 1 && !t.split {
		return nil
	}
	return t.groups[i]
}

// materialize makes group 0's tally a copy of the overall tally, when it is the only group.
func (t *tracker) materialize() {
	if t.split || len(t.groups) != 1 {
		return
	}
	g := t.groups[0]
	c := *t.overall
	c.pid, c.device, c.stream = g.pid, g.device, g.stream
	c.lifetime = t.overall.lifetime.clone(groupSketchCap)
	c.freeDur = nil
	c.sizeCount = append([]uint64(nil), t.sizes.count...)
	t.groups[0] = &c
	t.split = true
}
