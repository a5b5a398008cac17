package requests

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"
)

// logChunkOps is how many ops a chunk of a Log holds: 1 MiB of ops and 256 KiB of site indexes.
const logChunkOps = 1 << 16

// opBytes and siteIndexBytes are the sizes of an op and of a site index, in memory and spilled.
const (
	opBytes        = int64(unsafe.Sizeof(Op{}))
	siteIndexBytes = int64(unsafe.Sizeof(uint32(0)))
)

// Budget is the memory that request logs may hold, shared by every Log made with it; what does not
// fit is spilled to a temporary file. A nil *Budget holds everything in memory. It is safe for
// concurrent use.
type Budget struct{ left atomic.Int64 }

// NewBudget returns a budget of bytes.
func NewBudget(bytes uint64) *Budget {
	b := &Budget{}
	b.left.Store(int64(min(bytes, 1<<62)))
	return b
}

// take reserves n bytes and reports whether they were there.
func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		left := b.left.Load()
		if left < n {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *Budget) give(n int64) {
	if b != nil {
		b.left.Add(n)
	}
}

// logChunk is up to logChunkOps ops and the index of each op's site in the log's sites, held in
// memory or spilled (ops nil: the ops' bytes, then the indexes', at off in the spill file).
type logChunk struct {
	ops   []Op
	sites []uint32
	n     int
	off   int64
	mem   []byte // the mapping behind ops and sites, see chunkMemory
}

// Log is a trace's request stream decoded once (the ops of one layer, with the site of each) and
// read any number of times, by several readers at once. It holds its chunks in memory while its
// Budget lasts and spills the others to a temporary file, unlinked at once, so that a trace of any
// length is read from disk in its compact form rather than decoded again. Append ops, then Finish;
// read through Reader; Close gives its memory back and closes the file.
type Log struct {
	budget   *Budget
	dir      string
	hasSites bool // the chunks keep a site index per op
	chunks   []logChunk
	cur      logChunk // being filled: its ops and sites have room for logChunkOps
	held     int64    // bytes taken from budget
	siteIdx  map[Site]uint32
	sites    []Site                    // index → site; index 0 is the unknown site
	cached   [siteCacheSize]cachedSite // sites interned lately: spares most map lookups
	handles  []uint64
	slots    int
	n        uint64
	allocs   [65]uint64 // allocations by size: in (2^(k-1), 2^k] at k (a size of 1 at 0)
	file     *os.File
	size     int64 // bytes spilled
	finished bool
	err      error // the first spill error: every later Append and Finish returns it
}

// NewLog returns an empty log holding what budget allows in memory and spilling the rest to a
// file in dir ("" = os.TempDir()). With hasSites it keeps the site of each op (4 bytes more an
// op); without, it drops the sites it is given and its readers return none.
func NewLog(budget *Budget, dir string, hasSites bool) *Log {
	return &Log{budget: budget, dir: dir, hasSites: hasSites, siteIdx: map[Site]uint32{{}: 0}, sites: []Site{{}}}
}

// Append adds ops at the end of the log, with the site of each: sites is parallel to ops, or nil
// when the sites are unknown. It returns the error of a spill that failed (a full disk).
func (l *Log) Append(ops []Op, sites []Site) error {
	if l.err != nil {
		return l.err
	}
	if l.finished {
		return errors.New("append to a finished request log")
	}
	for len(ops) > 0 {
		if l.cur.ops == nil {
			l.cur.ops, l.cur.sites, l.cur.mem = chunkMemory(logChunkOps, l.hasSites)
		}
		k := min(len(ops), logChunkOps-len(l.cur.ops))
		l.cur.ops = append(l.cur.ops, ops[:k]...)
		for _, o := range ops[:k] {
			if o.IsAlloc() {
				l.allocs[bits.Len64(o.Size-1)]++
			}
		}
		if l.hasSites {
			for i := range k {
				var idx uint32
				if sites != nil {
					idx = l.intern(sites[i])
				}
				l.cur.sites = append(l.cur.sites, idx)
			}
		}
		ops, l.n = ops[k:], l.n+uint64(k)
		if sites != nil {
			sites = sites[k:]
		}
		if len(l.cur.ops) == logChunkOps {
			if err := l.store(); err != nil {
				return err
			}
		}
	}
	return nil
}

// AllocsBetween returns how many allocations of the log ask for more than lo bytes and at most hi,
// lo < hi; ok is false, and the count 0, unless lo and hi are powers of two: the log counts its
// allocations per power-of-two range of sizes only.
func (l *Log) AllocsBetween(lo, hi uint64) (n uint64, ok bool) {
	if lo >= hi || bits.OnesCount64(lo) != 1 || bits.OnesCount64(hi) != 1 {
		return 0, false
	}
	for k := bits.Len64(lo-1) + 1; k <= bits.Len64(hi-1); k++ {
		n += l.allocs[k]
	}
	return n, true
}

// intern returns the index of s among the log's sites, adding it if new.
func (l *Log) intern(s Site) uint32 {
	c := &l.cached[(uint64(s.PID)*0x9e3779b97f4a7c15^s.Callsite*0xff51afd7ed558ccd)>>(64-siteCacheBits)]
	if c.known && c.site == s {
		return c.idx
	}
	idx, ok := l.siteIdx[s]
	if !ok {
		idx = uint32(len(l.sites))
		l.siteIdx[s] = idx
		l.sites = append(l.sites, s)
	}
	*c = cachedSite{site: s, idx: idx, known: true}
	return idx
}

// siteCacheBits sizes Log's direct-mapped cache of sites: 256 entries, so that a program's
// allocations and frees, which come from different callsites in turn, mostly hit it.
const (
	siteCacheBits = 8
	siteCacheSize = 1 << siteCacheBits
)

// cachedSite is an entry of Log's site cache: a site and its index, when known.
type cachedSite struct {
	site  Site
	idx   uint32
	known bool
}

// heapChunk returns room for n ops, and with sites for their site indexes, on the Go heap.
func heapChunk(n int, withSites bool) (ops []Op, sites []uint32, mem []byte) {
	if withSites {
		sites = make([]uint32, 0, n)
	}
	return make([]Op, 0, n), sites, nil
}

// store moves the chunk being filled into the log: kept in memory when the budget has room for
// it, else spilled (and its storage reused for the next chunk).
func (l *Log) store() error {
	c := l.cur
	c.n = len(c.ops)
	if c.n == 0 {
		return nil
	}
	bytes := int64(c.n)*opBytes + int64(len(c.sites))*siteIndexBytes
	if l.budget.take(bytes) {
		l.held += bytes
		l.chunks, l.cur = append(l.chunks, c), logChunk{}
		return nil
	}
	if err := l.spill(&c); err != nil {
		l.err = err
		return err
	}
	l.chunks = append(l.chunks, logChunk{n: c.n, off: c.off})
	l.cur.ops, l.cur.sites = c.ops[:0], c.sites[:0]
	return nil
}

// spill writes c at the end of the spill file, creating it first, and sets c.off.
func (l *Log) spill(c *logChunk) error {
	if l.file == nil {
		f, err := os.CreateTemp(l.dir, "allocscope-requests-*")
		if err != nil {
			return fmt.Errorf("spill the request stream: %w", err)
		}
		l.file = f
		_ = os.Remove(f.Name()) // unlinked while open: nothing is left behind, whatever ends the process
	}
	c.off = l.size
	for _, b := range [][]byte{opsBytes(c.ops), indexBytes(c.sites)} {
		if _, err := l.file.WriteAt(b, l.size); err != nil {
			return fmt.Errorf("spill the request stream to %s: %w", l.file.Name(), err)
		}
		l.size += int64(len(b))
	}
	return nil
}

// Finish ends the log: its last ops are stored, and handles (stream index → recorded handle) and
// slots (the most blocks live at once) are what the extraction found. Readers may read it after.
func (l *Log) Finish(handles []uint64, slots int) error {
	if l.err != nil {
		return l.err
	}
	if err := l.store(); err != nil {
		return err
	}
	freeChunkMemory(l.cur.mem) // the buffer of spilled chunks, or nothing
	l.cur = logChunk{}
	l.handles, l.slots, l.finished = append([]uint64(nil), handles...), slots, true
	l.siteIdx = nil
	return nil
}

// Len returns the number of ops in the log.
func (l *Log) Len() uint64 { return l.n }

// Handles returns the recorded stream handle of each stream index the ops use.
func (l *Log) Handles() []uint64 { return l.handles }

// Slots returns the size of the live-block table the ops index.
func (l *Log) Slots() int { return l.slots }

// SpilledBytes returns how many bytes of the log are on disk.
func (l *Log) SpilledBytes() int64 { return l.size }

// Close gives the log's memory back to its budget and closes its spill file. It may be called
// more than once.
func (l *Log) Close() error {
	l.budget.give(l.held)
	for _, c := range append(l.chunks, l.cur) {
		freeChunkMemory(c.mem)
	}
	l.held, l.chunks, l.cur = 0, nil, logChunk{}
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	l.file = nil
	return err
}

// Reader returns a reader of the log from its first op.
func (l *Log) Reader() *LogReader { return &LogReader{log: l} }

// LogReader reads a finished Log chunk by chunk. Readers of one log are independent.
type LogReader struct {
	log   *Log
	next  int
	bufs  [2]logChunk // spilled chunks are read into these, in turn
	sites [2][]Site
}

// Next returns the next chunk's ops and, with withSites, the site of each (else, or when the log
// keeps no sites, nil), and io.EOF
// after the last chunk. What it returns stays valid until the second call after it, so that a
// caller may read the next chunk while the last one is still in use.
func (r *LogReader) Next(withSites bool) ([]Op, []Site, error) {
	l := r.log
	if !l.finished {
		return nil, nil, errors.New("read of an unfinished request log")
	}
	if r.next >= len(l.chunks) {
		return nil, nil, io.EOF
	}
	c, turn := l.chunks[r.next], r.next&1
	r.next++
	if c.ops == nil {
		var err error
		if c, err = r.load(c, &r.bufs[turn]); err != nil {
			return nil, nil, err
		}
	}
	if !withSites || !l.hasSites {
		return c.ops, nil, nil
	}
	sites := r.sites[turn][:0]
	for _, idx := range c.sites {
		sites = append(sites, l.sites[idx])
	}
	r.sites[turn] = sites
	return c.ops, sites, nil
}

// load reads the spilled chunk c into b.
func (r *LogReader) load(c logChunk, b *logChunk) (logChunk, error) {
	sites := 0 // site indexes to read
	if r.log.hasSites {
		sites = c.n
	}
	if cap(b.ops) < c.n || cap(b.sites) < sites {
		b.ops, b.sites = make([]Op, c.n), make([]uint32, sites)
	}
	b.ops, b.sites, b.n = b.ops[:c.n], b.sites[:sites], c.n
	off := c.off
	for _, dst := range [][]byte{opsBytes(b.ops), indexBytes(b.sites)} {
		if _, err := r.log.file.ReadAt(dst, off); err != nil {
			return logChunk{}, fmt.Errorf("read the spilled request stream: %w", err)
		}
		off += int64(len(dst))
	}
	return *b, nil
}

// opsBytes is the memory of ops as bytes: what a spill writes and reads back in the same process.
func opsBytes(ops []Op) []byte {
	if len(ops) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ops[0])), len(ops)*int(opBytes))
}

// indexBytes is the memory of site indexes as bytes.
func indexBytes(idx []uint32) []byte {
	if len(idx) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&idx[0])), len(idx)*int(siteIndexBytes))
}
