package intercept

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/allocscope/allocscope/trace"
)

// The raw per-process log written by shim.c (docs/DESIGN.md).
const (
	rawMagic         = "ALSCOPE1"
	rawVersion       = 1
	rawHeaderSize    = 4096
	rawRecordSize    = 64
	rawCmdlineOffset = 72
	flagPrivateSeq   = 1
	maxRingSlots     = 1 << 24
)

// functionInfo describes one intercepted entry point: what its function id in a raw record means.
type functionInfo struct {
	Name   string
	Op     trace.Op
	Memory trace.Memory
	Layer  trace.Layer
}

// functionTable maps a raw record's function id to its entry point. It mirrors the FUNCTIONS table in
// shim.c (TestFunctionTableMatchesShim checks that they agree); id 0 marks an uncommitted slot.
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
	PID         uint32
	PPID        uint32
	StartMonoNs int64
	StartRealNs int64
	Flags       uint64
	Claimed     uint64 // slots claimed by writers; may exceed the records committed after a crash
	Drained     uint64 // slots [0, Drained) are in the log file, the rest in the ring file
	RingSlots   uint32 // slots in the ring file
	Command     []string
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

// rawLog reads one process's raw log: the log file's header and drained slots, then the slots still
// in the ring file. Slot i (counted from 0 over the process's life) is in the log file when
// i < Drained, else in the ring at i mod RingSlots.
type rawLog struct {
	name     string
	r        io.ReaderAt // the log file
	ring     io.ReaderAt // the ring file, nil if absent
	header   rawHeader
	slots    int64 // slots readable: Drained plus those in the ring
	logSlots int64 // whole slots in the log file (more than Drained when a drain was cut short)
	trailing int64 // bytes after the drained slots of the log file (a drain cut short)
	lost     int64 // slots claimed but unreadable (the ring file is missing or short)
}

// openRawLog checks and decodes the header of the log file of size bytes read from r; ring (may be
// nil) is its ring file of ringSize bytes. name is used in errors.
func openRawLog(name string, r io.ReaderAt, size int64, ring io.ReaderAt, ringSize int64) (*rawLog, error) {
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
	body := uint64(size - rawHeaderSize)
	if h.Drained > body/rawRecordSize {
		return nil, fmt.Errorf("%s: header: %d records drained but the file holds %d", name, h.Drained, body/rawRecordSize)
	}
	l := &rawLog{name: name, r: r, header: h, slots: int64(h.Drained), logSlots: int64(body / rawRecordSize),
		trailing: int64(body - h.Drained*rawRecordSize)}
	inRing := min(h.Claimed-min(h.Claimed, h.Drained), uint64(h.RingSlots))
	if ring == nil || ringSize < int64(h.RingSlots)*rawRecordSize {
		ring, l.lost = nil, int64(inRing)
		inRing = 0
	}
	l.ring = ring
	l.slots += int64(inRing)
	return l, nil
}

func decodeHeader(b []byte) (rawHeader, error) {
	le := binary.LittleEndian
	if string(b[:8]) != rawMagic {
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
		Flags: le.Uint64(b[40:]), Claimed: le.Uint64(b[48:]), Drained: le.Uint64(b[56:]),
		RingSlots: le.Uint32(b[64:]),
	}
	if h.RingSlots > maxRingSlots {
		return rawHeader{}, fmt.Errorf("ring of %d slots exceeds %d", h.RingSlots, maxRingSlots)
	}
	n := le.Uint32(b[68:])
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

// check reports what is wrong with a committed record, or nil.
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

// slotBatch is the number of slots read at a time.
const slotBatch = 8192

// readSlots decodes the committed records of slots [first, first+n), appending them to dst. It also
// returns how many of those slots were never committed (a writer stopped mid-record). Errors name the
// file and the slot ("record N", counted from 0).
func (l *rawLog) readSlots(first, n int64, dst []rawRecord, buf []byte) ([]rawRecord, int64, error) {
	var skipped int64
	err := l.scanSlots(first, n, buf, func(slot int64, b []byte) error {
		if b[63] == 0 {
			skipped++
			return nil
		}
		rec := decodeRecord(b)
		if err := rec.check(); err != nil {
			return fmt.Errorf("%s: record %d: %w", l.name, slot, err)
		}
		dst = append(dst, rec)
		return nil
	})
	return dst, skipped, err
}

// scanSlots calls f with the 64 bytes of each slot of [first, first+n), in order. A slot past
// Drained is taken from the log file when a drain copied it there (and then crashed before advancing
// Drained), else from the ring.
func (l *rawLog) scanSlots(first, n int64, buf []byte, f func(slot int64, b []byte) error) error {
	var logBuf []byte
	for n > 0 {
		src, off, k := l.locate(first, n)
		b, err := readInto(src, off, k, buf)
		if err != nil {
			return fmt.Errorf("%s: record %d: %w", l.name, first, err)
		}
		var fromLog []byte // the log file's copy of ring slots, where it has them
		if first >= int64(l.header.Drained) && first < l.logSlots {
			if fromLog, err = readInto(l.r, rawHeaderSize+first*rawRecordSize, min(k, l.logSlots-first), logBuf); err != nil {
				return fmt.Errorf("%s: record %d: %w", l.name, first, err)
			}
			logBuf = fromLog
		}
		for i := int64(0); i < k; i++ {
			s := b[i*rawRecordSize : (i+1)*rawRecordSize]
			if (i+1)*rawRecordSize <= int64(len(fromLog)) && fromLog[(i+1)*rawRecordSize-1] != 0 {
				s = fromLog[i*rawRecordSize : (i+1)*rawRecordSize]
			}
			if err := f(first+i, s); err != nil {
				return err
			}
		}
		first += k
		n -= k
	}
	return nil
}

// readInto reads k slots at off into buf (grown if needed).
func readInto(src io.ReaderAt, off, k int64, buf []byte) ([]byte, error) {
	if int64(cap(buf)) >= k*rawRecordSize {
		buf = buf[:k*rawRecordSize]
	} else {
		buf = make([]byte, k*rawRecordSize)
	}
	if _, err := src.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// checkRecordBytes is check on the encoded record b.
func checkRecordBytes(b []byte) error {
	rec := rawRecord{TimeNs: int64(binary.LittleEndian.Uint64(b[8:])),
		DurationNs: int64(binary.LittleEndian.Uint64(b[16:])), Device: int8(b[62]), Function: b[63]}
	return rec.check()
}

// locate returns where slot first is and how many of the n slots from it lie there contiguously.
func (l *rawLog) locate(first, n int64) (io.ReaderAt, int64, int64) {
	drained := int64(l.header.Drained)
	k := min(n, slotBatch)
	if first < drained {
		return l.r, rawHeaderSize + first*rawRecordSize, min(k, drained-first)
	}
	ringSlots := int64(l.header.RingSlots)
	pos := first % ringSlots
	return l.ring, pos * rawRecordSize, min(k, ringSlots-pos)
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
	e.Result, e.Callsite = int32(rec.Result), rec.Callsite
	if fi.Op == trace.OpMap {
		e.Handle, e.Stream = rec.Stream, 0
	}
}
