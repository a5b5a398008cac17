package intercept

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/allocscope/allocscope/trace"
)

// The raw per-process log written by the shim (internal/intercept/shim/log.c, docs/DESIGN.md): a log file
// (a header, then chunks of laneSlots records flushed from lanes) and a lanes file (groups of
// lanes, each a 64-byte head in the group's first page and laneSlots records of its own).
const (
	rawMagic          = "ALSCOPE2"
	rawMagicV1        = "ALSCOPE1"
	rawVersion        = 2
	rawHeaderSize     = 4096
	rawRecordSize     = 64
	rawCmdlineOffset  = 80
	laneHeadSize      = 64
	laneHeadsSize     = 4096 // the page of lane heads at the start of a lane group
	flagPrivateSeq    = 1
	flagFailed        = 2
	maxLaneSlots      = 1 << 20
	maxLanesPerGroup  = laneHeadsSize / laneHeadSize
	controlFileName   = "control"
	controlFileSize   = 4096
	laneStateUnused   = 0
	recordFunctionOff = 63
	resultPool        = 0x8000 // bit of a record's result: the pool inside the program served the call
)

// functionInfo describes one intercepted entry point: what its function id in a raw record means.
type functionInfo struct {
	Name   string
	Op     trace.Op
	Memory trace.Memory
	Layer  trace.Layer
}

// functionTable maps a raw record's function id to its entry point. It mirrors the FUNCTIONS table in
// shim/common.h (TestFunctionTableMatchesShim checks that they agree); id 0 marks an empty slot.
var functionTable = [...]functionInfo{
	{},
	{"cudaMalloc", trace.OpAlloc, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaFree", trace.OpFree, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaMallocAsync", trace.OpAlloc, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaFreeAsync", trace.OpFree, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaMallocFromPoolAsync", trace.OpAlloc, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaMallocManaged", trace.OpAlloc, trace.MemoryManaged, trace.LayerRuntime},
	{"cudaMallocPitch", trace.OpAlloc, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaMalloc3D", trace.OpAlloc, trace.MemoryDevice, trace.LayerRuntime},
	{"cudaMallocHost", trace.OpAlloc, trace.MemoryHost, trace.LayerRuntime},
	{"cudaHostAlloc", trace.OpAlloc, trace.MemoryHost, trace.LayerRuntime},
	{"cudaFreeHost", trace.OpFree, trace.MemoryHost, trace.LayerRuntime},
	{"cuMemAlloc_v2", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemFree_v2", trace.OpFree, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocPitch_v2", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocManaged", trace.OpAlloc, trace.MemoryManaged, trace.LayerDriver},
	{"cuMemAllocAsync", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocAsync_ptsz", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemFreeAsync", trace.OpFree, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemFreeAsync_ptsz", trace.OpFree, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocFromPoolAsync", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocFromPoolAsync_ptsz", trace.OpAlloc, trace.MemoryDevice, trace.LayerDriver},
	{"cuMemAllocHost_v2", trace.OpAlloc, trace.MemoryHost, trace.LayerDriver},
	{"cuMemHostAlloc", trace.OpAlloc, trace.MemoryHost, trace.LayerDriver},
	{"cuMemFreeHost", trace.OpFree, trace.MemoryHost, trace.LayerDriver},
	{"cuMemCreate", trace.OpCreate, trace.MemoryVirtual, trace.LayerDriver},
	{"cuMemRelease", trace.OpRelease, trace.MemoryVirtual, trace.LayerDriver},
	{"cuMemMap", trace.OpMap, trace.MemoryVirtual, trace.LayerDriver},
	{"cuMemUnmap", trace.OpUnmap, trace.MemoryVirtual, trace.LayerDriver},
	{"cuMemAddressReserve", trace.OpReserve, trace.MemoryVirtual, trace.LayerDriver},
	{"cuMemAddressFree", trace.OpUnreserve, trace.MemoryVirtual, trace.LayerDriver},
}

// rawHeader is the decoded 4096-byte header of a raw log.
type rawHeader struct {
	PID           uint32
	PPID          uint32
	StartMonoNs   int64
	StartRealNs   int64
	Flags         uint64
	Chunks        uint64 // chunks claimed by lane flushes (a chunk past the file's end was never written)
	Lost          uint64 // events lost outside lanes
	LaneSlots     uint32 // records per lane and per chunk
	LanesPerGroup uint32
	FailErrno     int32 // why recording stopped, with flagFailed
	Command       []string
}

// rawRecord is one decoded 64-byte record.
type rawRecord struct {
	Seq        uint64
	TimeNs     int64
	DurationNs int64
	Address    uint64
	Size       uint64
	Stream     uint64
	Callsite   uint64
	TID        uint32
	Result     uint16
	Device     int8
	Function   uint8
}

// laneHead is the decoded head of one lane.
type laneHead struct {
	State      uint32
	Owner      uint32
	Count      uint32 // committed records not yet flushed
	FlushChunk uint64 // chunk+1 of a flush in progress or cut short, else 0
	Lost       uint64
}

// recordRun is a run of record slots in one file: a chunk of the log file or the unflushed records
// of a lane. A lane whose flush was cut short names the chunk it was being copied to (dup): the
// records that already reached it are read from the chunk and skipped in the lane.
type recordRun struct {
	src  io.ReaderAt
	off  int64 // byte offset of the first slot
	n    int64 // slots
	dup  *recordRun
	name string // "chunk N" or "lane N", for errors
}

// rawLog is one process's raw log: its header, the runs of records to read, and what it lost.
type rawLog struct {
	name   string
	header rawHeader
	runs   []recordRun
	lost   int64 // events the process counted as not logged
	lanes  bool  // the lanes file was there
}

// openRawLog checks and decodes the header of the log file of size bytes read from r and lists its
// record runs; lanes (may be nil) is its lanes file of lanesSize bytes. name is used in errors.
func openRawLog(name string, r io.ReaderAt, size int64, lanes io.ReaderAt, lanesSize int64) (*rawLog, error) {
	if size < rawHeaderSize {
		return nil, fmt.Errorf("%s: header: file has %d bytes, a raw log has at least %d", name, size, rawHeaderSize)
	}
	buf := make([]byte, rawHeaderSize)
	if _, err := r.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	h, err := decodeHeader(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	l := &rawLog{name: name, header: h, lost: int64(min(h.Lost, 1<<62))}
	chunkBytes := int64(h.LaneSlots) * rawRecordSize
	inFile := (size - rawHeaderSize + chunkBytes - 1) / chunkBytes // chunks at least partly in the file
	for c := int64(0); c < min(int64(min(h.Chunks, 1<<40)), inFile); c++ {
		off := rawHeaderSize + c*chunkBytes
		l.runs = append(l.runs, recordRun{src: r, off: off, n: slotsIn(size, off, int64(h.LaneSlots)),
			name: fmt.Sprintf("chunk %d", c)})
	}
	if lanes != nil {
		l.lanes = true
		if err := l.addLanes(lanes, lanesSize, r, size, chunkBytes); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// addLanes appends a run for every lane of the lanes file that holds unflushed records.
func (l *rawLog) addLanes(lanes io.ReaderAt, size int64, log io.ReaderAt, logSize, chunkBytes int64) error {
	h := &l.header
	groupBytes := laneHeadsSize + int64(h.LanesPerGroup)*chunkBytes
	heads := make([]byte, laneHeadsSize)
	for g := int64(0); g*groupBytes+laneHeadsSize <= size; g++ {
		if _, err := lanes.ReadAt(heads, g*groupBytes); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: lane group %d: %w", l.name, g, err)
		}
		for i := int64(0); i < int64(h.LanesPerGroup); i++ {
			lh := decodeLaneHead(heads[i*laneHeadSize:])
			lane := g*int64(h.LanesPerGroup) + i
			if lh.State == laneStateUnused {
				continue
			}
			if lh.Count > h.LaneSlots {
				return fmt.Errorf("%s: lane %d: %d records, a lane holds %d", l.name, lane, lh.Count, h.LaneSlots)
			}
			l.lost += int64(min(lh.Lost, 1<<40))
			if lh.Count == 0 {
				continue
			}
			off := g*groupBytes + laneHeadsSize + i*chunkBytes
			run := recordRun{src: lanes, off: off, n: slotsIn(size, off, int64(lh.Count)), name: fmt.Sprintf("lane %d", lane)}
			if c := lh.FlushChunk; c > 0 && c <= h.Chunks && c < 1<<40 {
				doff := rawHeaderSize + int64(c-1)*chunkBytes
				run.dup = &recordRun{src: log, off: doff, n: slotsIn(logSize, doff, run.n), name: fmt.Sprintf("chunk %d", c-1)}
			}
			l.runs = append(l.runs, run)
		}
	}
	return nil
}

// slotsIn returns how many of n slots from byte off lie in a file of size bytes: a run never reads (or
// allocates) past the end of its file, whatever its header says.
func slotsIn(size, off, n int64) int64 {
	return max(0, min(n, (size-off)/rawRecordSize))
}

func decodeHeader(b []byte) (rawHeader, error) {
	le := binary.LittleEndian
	switch string(b[:8]) {
	case rawMagic:
	case rawMagicV1:
		return rawHeader{}, errors.New("raw log format 1, written by an earlier allocscope: convert it with that version")
	default:
		if bytes.Count(b, []byte{0}) == len(b) {
			return rawHeader{}, errors.New("empty header: the process could not finish creating its log")
		}
		return rawHeader{}, fmt.Errorf("bad magic %q, not an allocscope raw log", b[:8])
	}
	if v := le.Uint32(b[8:]); v != rawVersion {
		return rawHeader{}, fmt.Errorf("format version %d, this allocscope reads version %d", v, rawVersion)
	}
	if rs := le.Uint32(b[12:]); rs != rawRecordSize {
		return rawHeader{}, fmt.Errorf("record size %d, want %d", rs, rawRecordSize)
	}
	h := rawHeader{
		PID: le.Uint32(b[16:]), PPID: le.Uint32(b[20:]),
		StartMonoNs: int64(le.Uint64(b[24:])), StartRealNs: int64(le.Uint64(b[32:])),
		Flags: le.Uint64(b[40:]), Chunks: le.Uint64(b[48:]), Lost: le.Uint64(b[56:]),
		LaneSlots: le.Uint32(b[64:]), LanesPerGroup: le.Uint32(b[68:]), FailErrno: int32(le.Uint32(b[72:])),
	}
	if h.LaneSlots == 0 || h.LaneSlots > maxLaneSlots {
		return rawHeader{}, fmt.Errorf("lanes of %d records, want 1 to %d", h.LaneSlots, maxLaneSlots)
	}
	if h.LanesPerGroup == 0 || h.LanesPerGroup > maxLanesPerGroup {
		return rawHeader{}, fmt.Errorf("%d lanes per group, want 1 to %d", h.LanesPerGroup, maxLanesPerGroup)
	}
	n := le.Uint32(b[76:])
	if n > rawHeaderSize-rawCmdlineOffset {
		return rawHeader{}, fmt.Errorf("command line length %d exceeds %d", n, rawHeaderSize-rawCmdlineOffset)
	}
	cmd := bytes.TrimSuffix(b[rawCmdlineOffset:rawCmdlineOffset+int(n)], []byte{0})
	if len(cmd) > 0 {
		for _, arg := range bytes.Split(cmd, []byte{0}) {
			h.Command = append(h.Command, string(arg))
		}
	}
	return h, nil
}

func decodeLaneHead(b []byte) laneHead {
	le := binary.LittleEndian
	return laneHead{State: le.Uint32(b[0:]), Owner: le.Uint32(b[4:]), Count: le.Uint32(b[8:]),
		FlushChunk: le.Uint64(b[16:]), Lost: le.Uint64(b[24:])}
}

// failure describes why the process stopped recording, or "" when it did not.
func (h *rawHeader) failure() string {
	if h.Flags&flagFailed == 0 {
		return ""
	}
	if h.FailErrno > 0 {
		return syscall.Errno(h.FailErrno).Error()
	}
	return "write error"
}

// decodeRecord decodes the 64-byte slot b.
func decodeRecord(b []byte) rawRecord {
	le := binary.LittleEndian
	return rawRecord{
		Seq: le.Uint64(b[0:]), TimeNs: int64(le.Uint64(b[8:])), DurationNs: int64(le.Uint64(b[16:])),
		Address: le.Uint64(b[24:]), Size: le.Uint64(b[32:]), Stream: le.Uint64(b[40:]),
		Callsite: le.Uint64(b[48:]), TID: le.Uint32(b[56:]), Result: le.Uint16(b[60:]),
		Device: int8(b[62]), Function: b[63],
	}
}

// check reports what is wrong with a written record, or nil.
func (rec *rawRecord) check() error {
	switch {
	case int(rec.Function) >= len(functionTable):
		return fmt.Errorf("unknown function id %d", rec.Function)
	case rec.Device < -1:
		return fmt.Errorf("device ordinal %d", rec.Device)
	case rec.TimeNs < 0:
		return fmt.Errorf("negative time %d ns", rec.TimeNs)
	case rec.DurationNs < 0:
		return fmt.Errorf("negative duration %d ns", rec.DurationNs)
	}
	return nil
}

// checkRecordBytes is check on the encoded record b.
func checkRecordBytes(b []byte) error {
	rec := rawRecord{TimeNs: int64(binary.LittleEndian.Uint64(b[8:])),
		DurationNs: int64(binary.LittleEndian.Uint64(b[16:])), Device: int8(b[62]), Function: b[63]}
	return rec.check()
}

// scanRun calls f with the 64 bytes of each written record of run i, in order: empty slots (function
// id 0) and lane records that a cut-short flush already copied to its chunk are left out. buf and
// dupBuf are reused when large enough. Errors name the file, the run and the slot.
func (l *rawLog) scanRun(i int, buf, dupBuf []byte, f func(b []byte) error) ([]byte, []byte, error) {
	run := &l.runs[i]
	buf, err := readInto(run.src, run.off, run.n, buf)
	if err != nil {
		return buf, dupBuf, fmt.Errorf("%s: %s: %w", l.name, run.name, err)
	}
	var dup []byte
	if run.dup != nil {
		if dupBuf, err = readInto(run.dup.src, run.dup.off, run.dup.n, dupBuf); err != nil {
			return buf, dupBuf, fmt.Errorf("%s: %s: %w", l.name, run.dup.name, err)
		}
		dup = dupBuf
	}
	for s := int64(0); s < run.n; s++ {
		b := buf[s*rawRecordSize : (s+1)*rawRecordSize]
		if b[recordFunctionOff] == 0 {
			continue
		}
		if dup != nil && (s+1)*rawRecordSize <= int64(len(dup)) {
			d := dup[s*rawRecordSize : (s+1)*rawRecordSize]
			if d[recordFunctionOff] != 0 && bytes.Equal(d[:8], b[:8]) {
				continue
			}
		}
		if err := checkRecordBytes(b); err != nil {
			return buf, dupBuf, fmt.Errorf("%s: %s: record %d: %w", l.name, run.name, s, err)
		}
		if err := f(b); err != nil {
			return buf, dupBuf, err
		}
	}
	return buf, dupBuf, nil
}

// readInto reads k slots at off into buf (grown if needed); what lies past the end of the file reads
// as empty slots.
func readInto(src io.ReaderAt, off, k int64, buf []byte) ([]byte, error) {
	if int64(cap(buf)) >= k*rawRecordSize {
		buf = buf[:k*rawRecordSize]
	} else {
		buf = make([]byte, k*rawRecordSize)
	}
	n, err := src.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	clear(buf[n:])
	return buf, nil
}

// event converts a record of the process described by h into a trace event.
func (rec *rawRecord) event(h *rawHeader) trace.Event {
	var e trace.Event
	rec.fillEvent(&e, h)
	return e
}

// fillEvent is event writing into e, field by field (no temporary event and bulk copy: the merge
// does this for every record).
func (rec *rawRecord) fillEvent(e *trace.Event, h *rawHeader) {
	fi := &functionTable[rec.Function]
	e.Seq, e.TimeNs, e.DurationNs, e.PID, e.TID = rec.Seq, rec.TimeNs, rec.DurationNs, h.PID, rec.TID
	e.Device, e.Op, e.Memory, e.Layer, e.Function = int32(rec.Device), fi.Op, fi.Memory, fi.Layer, fi.Name
	e.Size, e.Address, e.Handle, e.Stream = rec.Size, rec.Address, 0, rec.Stream
	e.Result, e.Callsite = int32(rec.Result&^resultPool), rec.Callsite
	e.Pool = rec.Result&resultPool != 0
	if fi.Op == trace.OpMap {
		e.Handle, e.Stream = rec.Stream, 0
	}
}
