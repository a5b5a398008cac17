package intercept

import "encoding/binary"

// encodeRawLog builds the bytes of a raw log whose records are all drained (no ring file), for tests.
func encodeRawLog(h rawHeader, recs []rawRecord) []byte {
	b := make([]byte, rawHeaderSize+len(recs)*rawRecordSize)
	le := binary.LittleEndian
	copy(b, rawMagic)
	le.PutUint32(b[8:], rawVersion)
	le.PutUint32(b[12:], rawRecordSize)
	le.PutUint32(b[16:], h.PID)
	le.PutUint32(b[20:], h.PPID)
	le.PutUint64(b[24:], uint64(h.StartMonoNs))
	le.PutUint64(b[32:], uint64(h.StartRealNs))
	le.PutUint64(b[40:], h.Flags)
	le.PutUint64(b[48:], h.Claimed)
	le.PutUint64(b[56:], h.Drained)
	le.PutUint32(b[64:], h.RingSlots)
	n := 0
	for _, arg := range h.Command {
		n += copy(b[rawCmdlineOffset+n:], arg)
		b[rawCmdlineOffset+n] = 0
		n++
	}
	le.PutUint32(b[68:], uint32(n))
	for i := range recs {
		encodeRecord(b[rawHeaderSize+i*rawRecordSize:], &recs[i])
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
