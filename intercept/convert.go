package intercept

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/allocscope/allocscope/trace"
)

// ConvertOptions tunes Convert.
type ConvertOptions struct {
	// Progress, when set, is called now and then with events done and the total expected.
	Progress func(done, total int64)
}

// Summary describes what Convert wrote.
type Summary struct {
	Events        int64    // events written
	Processes     int      // raw logs (processes) read
	Devices       []int32  // device ordinals seen, ascending
	PeakLiveBytes uint64   // peak of live device bytes (allocations minus frees), all processes together
	AllocCallNs   int64    // total time spent inside intercepted calls, ns
	Warnings      []string // non-fatal problems (uncommitted records skipped, ...)
}

// eventSink receives converted events; *trace.Writer is one.
type eventSink interface {
	Write(e *trace.Event) error
}

// Convert merges the raw logs in dir, in seq order, into w. It does not close w.
//
// Memory stays bounded: each log is cut into segments of 8192 slots, a segment is read and sorted
// only when the merge reaches its smallest seq, and dropped once done, so nearly sorted logs (the shim
// writes them so) keep about two segments per process in memory.
//
// The merge runs on the calling goroutine and hands each event straight to w, whose own goroutines
// encode and compress full batches meanwhile (an extra goroutine between the two, with a copy of
// each event, was slower: BenchmarkConvert).
func Convert(dir string, w *trace.Writer, opts ConvertOptions) (Summary, error) {
	if w == nil {
		return Summary{}, errors.New("convert raw logs: nil trace writer")
	}
	return convert(dir, w, opts)
}

// Command returns the command line recorded in the raw logs of dir (of the first process), for the trace metadata.
func Command(dir string) ([]string, error) {
	paths, err := rawLogPaths(dir)
	if err != nil {
		return nil, err
	}
	var best *rawHeader
	for _, p := range paths {
		lf, err := openLogFile(p)
		if err != nil {
			return nil, err
		}
		h := lf.log.header
		lf.close()
		if best == nil || h.StartMonoNs < best.StartMonoNs {
			best = &h
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%s: no raw logs (*.alog)", dir)
	}
	return best.Command, nil
}

func rawLogPaths(dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("read raw logs: %w", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.alog"))
	if err != nil {
		return nil, fmt.Errorf("read raw logs in %s: %w", dir, err)
	}
	sort.Strings(paths)
	return paths, nil
}

// segSlots is the number of record slots in one merge segment.
const segSlots = 8192

type segment struct {
	first  int64  // first slot
	n      int64  // slots
	minSeq uint64 // smallest seq of its committed records
	count  int    // committed records
}

// logFile is one raw log with its segments, scanned once before the merge.
type logFile struct {
	f       *os.File
	ring    *os.File // nil when there is no ring file
	log     *rawLog
	segs    []segment
	records int64
	skipped int64
}

func openLogFile(path string) (*logFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open raw log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open raw log: %w", err)
	}
	lf := &logFile{f: f}
	var ring io.ReaderAt
	var ringSize int64
	if rf, err := os.Open(strings.TrimSuffix(path, ".alog") + ".ring"); err == nil {
		lf.ring = rf
		if rst, err := rf.Stat(); err == nil {
			ring, ringSize = rf, rst.Size()
		}
	}
	l, err := openRawLog(path, f, st.Size(), ring, ringSize)
	if err != nil {
		lf.close()
		return nil, err
	}
	lf.log = l
	return lf, nil
}

// scan reads every slot once to find each segment's smallest seq and check the records, so that bad
// data is reported before anything is written.
func (lf *logFile) scan(_ []rawRecord, buf []byte) error {
	for first := int64(0); first < lf.log.slots; first += segSlots {
		n := min(segSlots, lf.log.slots-first)
		s := segment{first: first, n: n}
		err := lf.log.scanSlots(first, n, buf, func(slot int64, b []byte) error {
			if b[63] == 0 {
				lf.skipped++
				return nil
			}
			if err := checkRecordBytes(b); err != nil {
				return fmt.Errorf("%s: record %d: %w", lf.log.name, slot, err)
			}
			seq := binary.LittleEndian.Uint64(b)
			if s.count == 0 || seq < s.minSeq {
				s.minSeq = seq
			}
			s.count++
			return nil
		})
		if err != nil {
			return err
		}
		if s.count > 0 {
			lf.segs = append(lf.segs, s)
			lf.records += int64(s.count)
		}
	}
	return nil
}

func convert(dir string, sink eventSink, opts ConvertOptions) (Summary, error) {
	paths, err := rawLogPaths(dir)
	if err != nil {
		return Summary{}, err
	}
	c := newConverter(sink, opts)
	defer c.close()
	if err := c.open(paths); err != nil {
		return Summary{}, err
	}
	if len(paths) == 0 {
		c.sum.Warnings = append(c.sum.Warnings, fmt.Sprintf("%s: no raw logs (*.alog): the program made no intercepted call", dir))
	}
	if err := c.merge(); err != nil {
		return c.sum, err
	}
	return c.finish(), nil
}

type liveKey struct {
	pid  uint32
	addr uint64
}

// converter merges the logs and computes the summary.
type converter struct {
	sink     eventSink
	opts     ConvertOptions
	files    []*logFile
	total    int64
	sum      Summary
	event    trace.Event // the event being emitted (reused: the sink must not keep the pointer)
	live     uint64
	managed  map[liveKey]struct{}
	devices  [2]uint64 // bit set of device ordinals 0..127
	lastSeq  uint64
	dups     int64
	free     [][]rawRecord // segment buffers to reuse
	readBuf  []byte
	progress int64
}

func newConverter(sink eventSink, opts ConvertOptions) *converter {
	return &converter{sink: sink, opts: opts, managed: map[liveKey]struct{}{},
		readBuf: make([]byte, slotBatch*rawRecordSize)}
}

func (c *converter) open(paths []string) error {
	recs := make([]rawRecord, 0, segSlots)
	for _, p := range paths {
		lf, err := openLogFile(p)
		if err != nil {
			return err
		}
		c.files = append(c.files, lf)
		if err := lf.scan(recs, c.readBuf); err != nil {
			return err
		}
		c.total += lf.records
		if lf.skipped > 0 {
			c.warnf("%s: %d uncommitted records skipped (a thread stopped mid-record)", p, lf.skipped)
		}
		if lf.log.trailing > 0 {
			c.warnf("%s: %d bytes past the drained records (a drain was cut short; read with the ring)", p, lf.log.trailing)
		}
		if lf.log.lost > 0 {
			c.warnf("%s: ring file missing or short: %d records lost", p, lf.log.lost)
		}
		if lf.log.header.Flags&flagPrivateSeq != 0 {
			c.warnf("%s: process %d could not map the shared seq counter; its events are ordered by a private counter", p, lf.log.header.PID)
		}
	}
	c.sum.Processes = len(paths)
	return nil
}

func (c *converter) close() {
	for _, lf := range c.files {
		lf.close()
	}
}

func (lf *logFile) close() {
	lf.f.Close()
	if lf.ring != nil {
		lf.ring.Close()
	}
}

func (c *converter) warnf(format string, args ...any) {
	c.sum.Warnings = append(c.sum.Warnings, fmt.Sprintf(format, args...))
}

// cursor walks one segment of one log; recs is nil until the segment is loaded.
type cursor struct {
	lf   *logFile
	seg  int
	recs []rawRecord
	pos  int
}

func (cu *cursor) key() uint64 {
	if cu.recs == nil {
		return cu.lf.segs[cu.seg].minSeq
	}
	return cu.recs[cu.pos].Seq
}

func (c *converter) merge() error {
	var h cursorHeap
	for _, lf := range c.files {
		for i := range lf.segs {
			h = append(h, &cursor{lf: lf, seg: i})
		}
	}
	h.init()
	for len(h) > 0 {
		cu := h[0]
		if cu.recs == nil {
			if err := c.load(cu); err != nil {
				return err
			}
			h.fix0()
			continue
		}
		if err := c.emit(cu.lf, &cu.recs[cu.pos]); err != nil {
			return err
		}
		cu.pos++
		if cu.pos == len(cu.recs) {
			c.free = append(c.free, cu.recs[:0])
			h.pop0()
		} else {
			h.fix0()
		}
	}
	return nil
}

// load reads and sorts a segment.
func (c *converter) load(cu *cursor) error {
	var buf []rawRecord
	if n := len(c.free); n > 0 {
		buf, c.free = c.free[n-1], c.free[:n-1]
	} else {
		buf = make([]rawRecord, 0, segSlots)
	}
	s := cu.lf.segs[cu.seg]
	recs, _, err := cu.lf.log.readSlots(s.first, s.n, buf, c.readBuf)
	if err != nil {
		return err
	}
	if len(recs) != s.count {
		return fmt.Errorf("%s: record %d: file changed while converting", cu.lf.log.name, s.first)
	}
	sortBySeq(recs)
	cu.recs = recs
	return nil
}

// sortBySeq sorts recs by seq, stably. Segments are nearly sorted (threads interleave by a few
// records), so an insertion sort does it in one pass; when it has moved more than a few records per
// record on average, the rest is left to a stable merge sort.
func sortBySeq(recs []rawRecord) {
	budget := 8 * len(recs)
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq >= recs[i-1].Seq {
			continue
		}
		r := recs[i]
		j := i
		for ; j > 0 && recs[j-1].Seq > r.Seq; j-- {
			recs[j] = recs[j-1]
		}
		recs[j] = r
		if budget -= i - j; budget < 0 {
			slices.SortStableFunc(recs, func(a, b rawRecord) int { return cmp.Compare(a.Seq, b.Seq) })
			return
		}
	}
}

// emit converts one record, updates the summary and hands the event to the sink.
func (c *converter) emit(lf *logFile, rec *rawRecord) error {
	e := &c.event
	rec.fillEvent(e, &lf.log.header)
	if c.sum.Events > 0 && e.Seq == c.lastSeq {
		c.dups++
	}
	c.lastSeq = e.Seq
	c.account(e)
	if err := c.sink.Write(e); err != nil {
		return fmt.Errorf("write event seq %d: %w", e.Seq, err)
	}
	c.sum.Events++
	if c.opts.Progress != nil && c.sum.Events-c.progress >= 1<<16 {
		c.progress = c.sum.Events
		c.opts.Progress(c.sum.Events, c.total)
	}
	return nil
}

// account fixes the memory kind of frees of managed memory (cudaFree and cuMemFree_v2 free both) and
// tracks live device bytes, devices and time in calls.
func (c *converter) account(e *trace.Event) {
	c.sum.AllocCallNs += e.DurationNs
	if e.Device >= 0 {
		c.devices[e.Device>>6] |= 1 << (e.Device & 63)
	}
	key := liveKey{e.PID, e.Address}
	switch {
	case e.Op == trace.OpAlloc && e.Memory == trace.MemoryManaged && e.OK():
		c.managed[key] = struct{}{}
	case e.Op == trace.OpFree && e.Memory == trace.MemoryDevice && len(c.managed) > 0:
		if _, ok := c.managed[key]; ok {
			e.Memory = trace.MemoryManaged
			if e.OK() {
				delete(c.managed, key)
			}
		}
	}
	if !e.OK() {
		return
	}
	counted := e.Memory == trace.MemoryDevice || e.Op == trace.OpCreate || e.Op == trace.OpRelease
	switch {
	case !counted:
	case e.Op == trace.OpAlloc || e.Op == trace.OpCreate:
		c.live += e.Size
		c.sum.PeakLiveBytes = max(c.sum.PeakLiveBytes, c.live)
	case e.Op == trace.OpFree || e.Op == trace.OpRelease:
		c.live -= min(c.live, e.Size)
	}
}

func (c *converter) finish() Summary {
	if c.dups > 0 {
		c.warnf("%d events share their seq with the event before (logs from more than one recording in one directory?)", c.dups)
	}
	for d := int32(0); d < 128; d++ {
		if c.devices[d>>6]&(1<<(d&63)) != 0 {
			c.sum.Devices = append(c.sum.Devices, d)
		}
	}
	if c.opts.Progress != nil {
		c.opts.Progress(c.sum.Events, c.total)
	}
	return c.sum
}

// cursorHeap is a min-heap of cursors by key; a not-yet-loaded segment sorts before a loaded one with
// the same key, so it is loaded before that seq is emitted.
type cursorHeap []*cursor

func (h cursorHeap) less(i, j int) bool {
	ki, kj := h[i].key(), h[j].key()
	if ki != kj {
		return ki < kj
	}
	return h[i].recs == nil && h[j].recs != nil
}

func (h cursorHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h cursorHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h cursorHeap) fix0() { h.down(0) }

func (h *cursorHeap) pop0() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	old[n] = nil
	*h = old[:n]
	h.down(0)
}
