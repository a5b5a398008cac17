package stats

// maxDistinctSizes bounds the exact-size table; sizes beyond it are folded into their log2
// bucket's upper bound (and a warning says so).
const maxDistinctSizes = 1 << 20

// sizeTable counts requests per exact size, the blocks of each size live now, and the blocks of
// each size that were live at the moment of the peak.
//
// The peak snapshot is kept exact in amortised O(1) per event: changes since the last snapshot
// are journaled and replayed onto the snapshot when a new peak is reached; when the journal
// would outgrow the table, journaling stops and the next snapshot copies the live counts.
type sizeTable struct {
	index    map[uint64]int32
	sizes    []uint64
	count    []uint64
	live     []int32
	atPeak   []int32
	journal  []int32 // +(i+1) for an allocation of size i, -(i+1) for a free
	overflow bool
	folded   bool
	cache    [256]sizeCacheEntry // direct-mapped cache in front of index
}

type sizeCacheEntry struct {
	size uint64
	idx  int32
	ok   bool
}

func newSizeTable() *sizeTable { return &sizeTable{index: make(map[uint64]int32)} }

// lookup returns the index of size, adding it when new.
func (t *sizeTable) lookup(size uint64) int32 {
	c := &t.cache[(size>>9^size)*0x9e3779b97f4a7c15>>56]
	if c.ok && c.size == size {
		return c.idx
	}
	return t.lookupMiss(size, c)
}

// lookupMiss returns the index of size, which cache entry c does not hold, and caches it there.
func (t *sizeTable) lookupMiss(size uint64, c *sizeCacheEntry) int32 {
	i := t.lookupMap(size)
	*c = sizeCacheEntry{size: size, idx: i, ok: i >= 0 && t.sizes[i] == size}
	return i
}

func (t *sizeTable) lookupMap(size uint64) int32 {
	if i, ok := t.index[size]; ok {
		return i
	}
	if len(t.sizes) >= maxDistinctSizes {
		t.folded = true
		b := log2Bucket(size)
		folded := ^uint64(0)
		if b < 64 {
			folded = uint64(1)<<b - 1
		}
		if i, ok := t.index[folded]; ok {
			return i
		}
		size = folded
	}
	i := int32(len(t.sizes))
	t.index[size] = i
	t.sizes = append(t.sizes, size)
	t.count = append(t.count, 0)
	t.live = append(t.live, 0)
	return i
}

func (t *sizeTable) record(delta int32) {
	if t.overflow {
		return
	}
	if len(t.journal) >= len(t.sizes)+64 {
		t.overflow = true
		t.journal = t.journal[:0]
		return
	}
	t.journal = append(t.journal, delta)
}

func (t *sizeTable) alloc(i int32) {
	t.count[i]++
	t.live[i]++
	t.record(i + 1)
}

func (t *sizeTable) free(i int32) {
	t.live[i]--
	t.record(-(i + 1))
}

// snapshot makes atPeak equal to the live counts now.
func (t *sizeTable) snapshot() {
	for len(t.atPeak) < len(t.live) {
		t.atPeak = append(t.atPeak, 0)
	}
	if t.overflow {
		copy(t.atPeak, t.live)
		t.overflow = false
	} else {
		for _, d := range t.journal {
			if d > 0 {
				t.atPeak[d-1]++
			} else {
				t.atPeak[-d-1]--
			}
		}
	}
	t.journal = t.journal[:0]
}

// SizeTally is one exact request size: how often it was requested and how many blocks of it
// were live at the peak.
type SizeTally struct {
	Size   uint64
	Count  uint64
	AtPeak uint64
}

func (t *sizeTable) tallies() []SizeTally {
	out := make([]SizeTally, len(t.sizes))
	for i, s := range t.sizes {
		out[i] = SizeTally{Size: s, Count: t.count[i]}
		if i < len(t.atPeak) && t.atPeak[i] > 0 {
			out[i].AtPeak = uint64(t.atPeak[i])
		}
	}
	return out
}
