package intercept

import "encoding/binary"

// Defaults of the test encoders: the shim's lane size and group size.
const (
	testLaneSlots     = 1024
	testLanesPerGroup = 32
)

// withDefaults fills the lane geometry a test header leaves zero.
func (h rawHeader) withDefaults() rawHeader {
	if h.LaneSlots == 0 {
		h.LaneSlots = testLaneSlots
	}
	if h.LanesPerGroup == 0 {
		h.LanesPerGroup = testLanesPerGroup
	}
	return h
}

// encodeRawLog builds the bytes of a raw log whose records fill its chunks in order (h.LaneSlots
// to a chunk; the last one short), for tests. h.Chunks defaults to the chunks the records need.
func encodeRawLog(h rawHeader, recs []rawRecord) []byte {
	h = h.withDefaults()
	if h.Chunks == 0 {
		h.Chunks = uint64((len(recs) + int(h.LaneSlots) - 1) / int(h.LaneSlots))
	}
	b := make([]byte, rawHeaderSize+len(recs)*rawRecordSize)
	encodeHeader(b, &h)
	for i := range recs {
		encodeRecord(b[rawHeaderSize+i*rawRecordSize:], &recs[i])
	}
	return b
}

func encodeHeader(b []byte, h *rawHeader) {
	le := binary.LittleEndian
	copy(b, rawMagic)
	le.PutUint32(b[8:], rawVersion)
	le.PutUint32(b[12:], rawRecordSize)
	le.PutUint32(b[16:], h.PID)
	le.PutUint32(b[20:], h.PPID)
	le.PutUint64(b[24:], uint64(h.StartMonoNs))
	le.PutUint64(b[32:], uint64(h.StartRealNs))
	le.PutUint64(b[40:], h.Flags)
	le.PutUint64(b[48:], h.Chunks)
	le.PutUint64(b[56:], h.Lost)
	le.PutUint32(b[64:], h.LaneSlots)
	le.PutUint32(b[68:], h.LanesPerGroup)
	le.PutUint32(b[72:], uint32(h.FailErrno))
	n := 0
	for _, arg := range h.Command {
		n += copy(b[rawCmdlineOffset+n:], arg)
		b[rawCmdlineOffset+n] = 0
		n++
	}
	le.PutUint32(b[76:], uint32(n))
}

// testLane is one lane of a lanes file built by encodeLanes.
type testLane struct {
	head laneHead
	recs []rawRecord // the lane's slots from 0 (more than head.Count to leave stale records behind)
}

// encodeLanes builds a lanes file for h's geometry holding lanes in order (as many groups as needed).
func encodeLanes(h rawHeader, lanes []testLane) []byte {
	h = h.withDefaults()
	per := int(h.LanesPerGroup)
	laneBytes := int(h.LaneSlots) * rawRecordSize
	groupBytes := laneHeadsSize + per*laneBytes
	b := make([]byte, (len(lanes)+per-1)/per*groupBytes)
	le := binary.LittleEndian
	for i, l := range lanes {
		g, j := i/per, i%per
		hb := b[g*groupBytes+j*laneHeadSize:]
		le.PutUint32(hb[0:], l.head.State)
		le.PutUint32(hb[4:], l.head.Owner)
		le.PutUint32(hb[8:], l.head.Count)
		le.PutUint64(hb[16:], l.head.FlushChunk)
		le.PutUint64(hb[24:], l.head.Lost)
		for k := range l.recs {
			encodeRecord(b[g*groupBytes+laneHeadsSize+j*laneBytes+k*rawRecordSize:], &l.recs[k])
		}
	}
	return b
}

func encodeRecord(s []byte, r *rawRecord) {
	le := binary.LittleEndian
	le.PutUint64(s[0:], r.Seq)
	le.PutUint64(s[8:], uint64(r.TimeNs))
	le.PutUint64(s[16:], uint64(r.DurationNs))
	le.PutUint64(s[24:], r.Address)
	le.PutUint64(s[32:], r.Size)
	le.PutUint64(s[40:], r.Stream)
	le.PutUint64(s[48:], r.Callsite)
	le.PutUint32(s[56:], r.TID)
	le.PutUint16(s[60:], r.Result)
	s[62] = byte(r.Device)
	s[63] = r.Function
}

// readAllRecords reads every record of l, run by run, for tests.
func readAllRecords(l *rawLog) ([]rawRecord, error) {
	var recs []rawRecord
	var buf, dup []byte
	for i := range l.runs {
		var err error
		buf, dup, err = l.scanRun(i, buf, dup, func(b []byte) error {
			recs = append(recs, decodeRecord(b))
			return nil
		})
		if err != nil {
			return recs, err
		}
	}
	return recs, nil
}
