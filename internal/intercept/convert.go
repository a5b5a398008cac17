package intercept

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/allocscope/allocscope/internal/poolactivity"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/trace"
)

// ConvertOptions tunes Convert.
type ConvertOptions struct {
	// Progress, when set, is called now and then with events done and the total expected.
	Progress func(done, total int64)
	// Extra are events from outside the raw logs (the frameworks' own allocator requests that
	// record captures), sorted by TimeNs on the raw logs' clock. They are merged in time order:
	// each goes before the first raw-log event with a later time. With any, every event's Seq
	// becomes its position in the merged stream (the trace's seq is one global order); without,
	// the raw logs' seqs are kept. They are counted in Summary.Events and Summary.Extra only.
	Extra []trace.Event
}

// Summary describes what Convert wrote.
type Summary struct {
	Events        int64                  // events written
	Processes     int                    // process images (a fork, an exec) whose logs hold events
	Devices       []int32                // device ordinals seen, ascending
	PeakLiveBytes uint64                 // peak live bytes of the trace's requests, all processes together, as analyze counts them (requests.PeakLive)
	PoolServed    int64                  // allocations record --pool's pool served (events with Pool set)
	Extra         int64                  // events of ConvertOptions.Extra written (part of Events)
	AllocCallNs   int64                  // total time spent inside intercepted calls, ns
	Lost          int64                  // events the shim could not write (full disk, unwritable log, ...)
	ShimLoads     int64                  // processes that loaded the shim; -1 when the directory has no control file
	Pool          *poolactivity.Activity // what record --pool's pool did; nil when no process served
	// IPCExportSizes are the sizes of the device allocations the program exported by IPC
	// (cudaIpcGetMemHandle), distinct, ascending: analyze sends such requests to CUDA under
	// record --pool (trace.Info.IPCExportSizes).
	IPCExportSizes []uint64
	Warnings       []string // non-fatal problems, one line each (lost events, private seq counters, ...)
}

// eventSink receives converted events; *trace.Writer is one.
type eventSink interface {
	Write(e *trace.Event) error
}

// Convert merges the raw logs in dir, in seq order, into w. It does not close w. It is OpenLogs,
// Logs.Convert and Logs.Close.
func Convert(dir string, w *trace.Writer, opts ConvertOptions) (Summary, error) {
	if w == nil {
		return Summary{}, errors.New("convert raw logs: nil trace writer")
	}
	return convert(dir, w, opts)
}

func convert(dir string, sink eventSink, opts ConvertOptions) (Summary, error) {
	logs, err := OpenLogs(dir)
	if err != nil {
		return Summary{}, err
	}
	defer logs.Close()
	return logs.convert(sink, opts)
}

// Logs is the set of raw logs of one recording directory, opened and checked, ready to convert.
type Logs struct {
	dir     string
	files   []*logFile
	total   int64   // records to convert
	control control // the control file's counters
	sum     Summary // what is known before converting: lost events, warnings
}

// OpenLogs opens and checks every raw log in dir (reading each record once), so that bad data is
// reported before anything is written, and counts the events the shim could not write.
func OpenLogs(dir string) (*Logs, error) {
	paths, err := rawLogPaths(dir)
	if err != nil {
		return nil, err
	}
	l := &Logs{dir: dir}
	if l.control, err = readControl(dir); err != nil {
		return nil, err
	}
	buf := make([]byte, segBytes)
	for _, p := range paths {
		lf, err := openLogFile(p)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.files = append(l.files, lf)
		if err := lf.scan(buf); err != nil {
			l.Close()
			return nil, err
		}
		l.total += lf.records
	}
	l.summarizeFaults()
	return l, nil
}

// Lost returns the number of events the shim saw but could not write.
func (l *Logs) Lost() int64 { return l.sum.Lost }

// Pool returns what record --pool's pool did in the recording, or nil.
func (l *Logs) Pool() *poolactivity.Activity { return l.sum.Pool }

// IPCExportSizes returns the sizes of the device allocations the program exported by IPC (Summary's).
func (l *Logs) IPCExportSizes() []uint64 { return l.sum.IPCExportSizes }

// ClockOffsets returns, per pid, the difference between the wall clock and the monotonic clock of
// the raw logs' timestamps (start_real_ns - start_mono_ns of the process's first log): a wall-clock
// time in ns minus it is on the trace's clock.
func (l *Logs) ClockOffsets() map[uint32]int64 {
	offsets := map[uint32]int64{}
	for _, lf := range l.files {
		h := &lf.log.header
		if _, ok := offsets[h.PID]; !ok {
			offsets[h.PID] = h.StartRealNs - h.StartMonoNs
		}
	}
	return offsets
}

// Close closes the log files.
func (l *Logs) Close() error {
	for _, lf := range l.files {
		lf.close()
	}
	l.files = nil
	return nil
}

// Convert merges the logs in seq order into w, which it does not close.
//
// Memory stays bounded: each log is cut into runs (chunks of its log file, and its lanes), a run is
// read and sorted only when the merge reaches its smallest seq, and dropped once done, so only the
// runs that overlap in seq (about one per thread) are in memory at a time.
//
// The merge runs on the calling goroutine and hands each event straight to w, whose own goroutines
// encode and compress full batches meanwhile (an extra goroutine between the two, with a copy of
// each event, was slower: BenchmarkConvert).
func (l *Logs) Convert(w *trace.Writer, opts ConvertOptions) (Summary, error) {
	if w == nil {
		return Summary{}, errors.New("convert raw logs: nil trace writer")
	}
	return l.convert(w, opts)
}

func (l *Logs) convert(sink eventSink, opts ConvertOptions) (Summary, error) {
	c := newConverter(sink, opts, l)
	if err := c.merge(); err != nil {
		return c.sum, err
	}
	if err := c.emitExtra(math.MaxInt64, true); err != nil {
		return c.sum, err
	}
	return c.finish(), nil
}

// summarizeFaults counts lost events and writes the warnings about faults the logs record.
func (l *Logs) summarizeFaults() {
	s := &l.sum
	s.ShimLoads = l.control.processes
	s.Pool = l.control.pool
	s.IPCExportSizes = l.control.exports
	for _, lf := range l.files {
		h := &lf.log.header
		s.Lost += lf.log.lost
		switch {
		case h.failure() != "":
			s.Warnings = append(s.Warnings, fmt.Sprintf("process %d (%s) stopped recording: cannot write its log: %s; %d later events were not recorded",
				h.PID, commandLine(h.Command), h.failure(), lf.log.lost))
		case lf.log.lost > 0:
			s.Warnings = append(s.Warnings, fmt.Sprintf("process %d (%s): %d events were not recorded", h.PID, commandLine(h.Command), lf.log.lost))
		}
		if !lf.log.lanes {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s: lanes file missing: the events not yet flushed to the log are lost", lf.log.name))
		}
		if h.Flags&flagPrivateSeq != 0 && lf.records > 0 {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s: process %d could not map the shared seq counter; its events are ordered by a private counter", lf.log.name, h.PID))
		}
	}
	if c := l.control; c.openFailed > 0 {
		s.Lost += c.lost
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d process(es) could not create their log; %d of their events were not recorded", c.openFailed, c.lost))
	}
	if l.total == 0 && s.Lost == 0 {
		if len(l.files) == 0 && l.control.processes <= 0 {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s: no process loaded the shim (a static binary, or LD_PRELOAD removed?)", l.dir))
		} else {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s: the program made no intercepted call", l.dir))
		}
	}
}

// commandLine joins a command for a message, shortened to about 40 characters.
func commandLine(cmd []string) string {
	s := strings.Join(cmd, " ")
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	if s == "" {
		s = "?"
	}
	return s
}

// control holds the counters of a recording's control file.
type control struct {
	processes  int64 // processes that loaded the shim; -1 without a control file
	openFailed int64
	lost       int64
	pool       *poolactivity.Activity // nil when no pool reserved anything
	exports    []uint64               // pool_counters.ipc_export_sizes, distinct, ascending
}

// readControl reads dir's control file; a missing one gives processes -1.
func readControl(dir string) (control, error) {
	path := filepath.Join(dir, controlFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return control{processes: -1}, nil
	}
	if err != nil {
		return control{}, fmt.Errorf("read raw logs: %w", err)
	}
	if len(b) < 32 {
		return control{}, fmt.Errorf("%s: %d bytes, want %d", path, len(b), controlFileSize)
	}
	le := binary.LittleEndian
	clamp := func(v uint64) int64 { return int64(min(v, 1<<62)) }
	c := control{processes: clamp(le.Uint64(b[8:])), openFailed: clamp(le.Uint64(b[16:])), lost: clamp(le.Uint64(b[24:]))}
	if len(b) >= 32+8*controlPoolCountersV1 {
		c.pool = poolActivity(b[32:], clamp)
	}
	c.exports = exportSizes(b[min(len(b), 32+8*controlPoolCounters):])
	return c, nil
}

// controlExportSizes is EXPORT_SIZES of log.h: the entries of pool_counters.ipc_export_sizes.
const controlExportSizes = 16

// exportSizes decodes pool_counters.ipc_export_sizes (b starts there): the sizes noted, distinct,
// ascending; a shorter file (an older shim's) has none.
func exportSizes(b []byte) []uint64 {
	var sizes []uint64
	for i := 0; i < controlExportSizes && 8*i+8 <= len(b); i++ {
		if v := binary.LittleEndian.Uint64(b[8*i:]); v != 0 && !slices.Contains(sizes, v) {
			sizes = append(sizes, v)
		}
	}
	slices.Sort(sizes)
	return sizes
}

// controlPoolCountersV1 is the number of uint64 counters of struct pool_counters (log.h), after the
// four of struct control, that every shim with a pool writes; controlPoolCounters is this build's
// number. A shorter control file reads the counters it lacks as 0 (the file is CONTROL_SIZE bytes
// long, so an older shim's reads its newer counters as 0 anyway).
const (
	controlPoolCountersV1 = 12
	controlPoolCounters   = controlPoolCountersV1 + controlPassReasons + 8
	// controlPassReasons is PASS_REASONS of log.h's enum pool_pass, whose order poolactivity.PassReasons
	// names.
	controlPassReasons = 8
)

// poolActivity decodes struct pool_counters; nil when no pool reserved anything.
func poolActivity(b []byte, clamp func(uint64) int64) *poolactivity.Activity {
	var v [controlPoolCounters]uint64
	for i := range v {
		if 8*i+8 <= len(b) {
			v[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	}
	if v[2] == 0 && v[4] == 0 { // no reservation, nothing passed through: no pool was in use
		return nil
	}
	p := &poolactivity.Activity{Syncs: clamp(v[0]), SyncNs: clamp(v[1]), Reservations: clamp(v[2]),
		Fallbacks: clamp(v[3]), PassedThrough: clamp(v[4]), Events: clamp(v[5]), StreamWaits: clamp(v[6]),
		HostWaits: clamp(v[7]), PeakReservedBytes: v[8], IPCExports: clamp(v[9]), Barriers: clamp(v[10]),
		StreamsApart: clamp(v[11])}
	rest := v[controlPoolCountersV1:]
	for i, name := range poolactivity.PassReasons[:controlPassReasons] {
		if rest[i] > 0 {
			if p.PassedBy == nil {
				p.PassedBy = map[string]int64{}
			}
			p.PassedBy[name] = clamp(rest[i])
		}
	}
	rest = rest[controlPassReasons:]
	p.PoolsNotMade, p.FirstNotMadeError, p.PeakReservedSumBytes = clamp(rest[0]), clamp(rest[1]), rest[2]
	p.CapturedFrees, p.LateFreesKept, p.Retired = clamp(rest[3]), clamp(rest[4]), clamp(rest[5])
	p.IdleReleases, p.IdleReleasedBytes = clamp(rest[6]), rest[7]
	return p
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

// segBytes is the size of the read buffer: one run of the shim's lanes (1024 records).
const segBytes = 1024 * rawRecordSize

// segment is a run of a log that holds records.
type segment struct {
	run    int    // index in the log's runs
	minSeq uint64 // smallest seq of its records
	count  int    // records
}

// logFile is one raw log with its segments, scanned once before the merge.
type logFile struct {
	f       *os.File
	lanes   *os.File // nil when there is no lanes file
	log     *rawLog
	segs    []segment
	records int64
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
	var lanes io.ReaderAt
	var lanesSize int64
	if lfile, err := os.Open(strings.TrimSuffix(path, ".alog") + ".lanes"); err == nil {
		lf.lanes = lfile
		if lst, err := lfile.Stat(); err == nil {
			lanes, lanesSize = lfile, lst.Size()
		}
	}
	l, err := openRawLog(path, f, st.Size(), lanes, lanesSize)
	if err != nil {
		lf.close()
		return nil, err
	}
	lf.log = l
	return lf, nil
}

// scan reads every run once to find each one's smallest seq and check its records.
func (lf *logFile) scan(buf []byte) error {
	var dupBuf []byte
	for i := range lf.log.runs {
		s := segment{run: i}
		var err error
		buf, dupBuf, err = lf.log.scanRun(i, buf, dupBuf, func(b []byte) error {
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

func (lf *logFile) close() {
	lf.f.Close()
	if lf.lanes != nil {
		lf.lanes.Close()
	}
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
	peak     *requests.PeakLive
	managed  map[liveKey]struct{}
	devices  [2]uint64 // bit set of device ordinals 0..127
	lastSeq  uint64
	dups     int64
	free     [][]rawRecord // segment buffers to reuse
	readBuf  []byte
	dupBuf   []byte
	progress int64
	extra    int // the next of opts.Extra to write
}

func newConverter(sink eventSink, opts ConvertOptions, l *Logs) *converter {
	c := &converter{sink: sink, opts: opts, files: l.files, total: l.total, managed: map[liveKey]struct{}{},
		readBuf: make([]byte, segBytes), peak: requests.NewPeakLive()}
	c.sum.Lost, c.sum.ShimLoads, c.sum.Pool, c.sum.IPCExportSizes = l.sum.Lost, l.sum.ShimLoads, l.sum.Pool, l.sum.IPCExportSizes
	for _, lf := range l.files {
		if lf.records > 0 {
			c.sum.Processes++ // a process image: a forked child that execs leaves two logs
		}
	}
	c.sum.Warnings = slices.Clone(l.sum.Warnings)
	return c
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
	var recs []rawRecord
	if n := len(c.free); n > 0 {
		recs, c.free = c.free[n-1], c.free[:n-1]
	} else {
		recs = make([]rawRecord, 0, segBytes/rawRecordSize)
	}
	s := cu.lf.segs[cu.seg]
	var err error
	c.readBuf, c.dupBuf, err = cu.lf.log.scanRun(s.run, c.readBuf, c.dupBuf, func(b []byte) error {
		recs = append(recs, decodeRecord(b))
		return nil
	})
	if err != nil {
		return err
	}
	if len(recs) != s.count {
		return fmt.Errorf("%s: %s: file changed while converting", cu.lf.log.name, cu.lf.log.runs[s.run].name)
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
	if err := c.emitExtra(e.TimeNs, false); err != nil {
		return err
	}
	if c.sum.Events > 0 && e.Seq == c.lastSeq {
		c.dups++
	}
	c.lastSeq = e.Seq
	c.account(e)
	if len(c.opts.Extra) > 0 {
		e.Seq = uint64(c.sum.Events)
	}
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

// emitExtra writes the extra events timed before before (all of them with all), each with its
// position in the merged stream as seq.
func (c *converter) emitExtra(before int64, all bool) error {
	for ; c.extra < len(c.opts.Extra); c.extra++ {
		x := c.opts.Extra[c.extra]
		if !all && x.TimeNs >= before {
			return nil
		}
		x.Seq = uint64(c.sum.Events)
		c.peak.Add(&x)
		if err := c.sink.Write(&x); err != nil {
			return fmt.Errorf("write %s event of pid %d: %w", x.Function, x.PID, err)
		}
		c.sum.Events++
		c.sum.Extra++
	}
	return nil
}

// account fixes the memory kind of frees of managed memory (cudaFree and cuMemFree_v2 free both) and
// counts the event toward peak live bytes, devices and time in calls.
func (c *converter) account(e *trace.Event) {
	c.sum.AllocCallNs += e.DurationNs
	if e.Pool && e.Op == trace.OpAlloc {
		c.sum.PoolServed++
	}
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
	c.peak.Add(e)
}

func (c *converter) finish() Summary {
	c.sum.PeakLiveBytes = c.peak.Bytes()
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
