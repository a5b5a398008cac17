package analysis

import (
	"encoding/binary"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// eventsFromBytes decodes fuzz input into events: 12 bytes each (op, layer, memory, result flag,
// size exponent and mantissa, address slot, pid, stream, duration).
func eventsFromBytes(data []byte) []trace.Event {
	var out []trace.Event
	for i := 0; i+12 <= len(data) && len(out) < 4096; i += 12 {
		d := data[i : i+12]
		e := trace.Event{Seq: uint64(len(out) + 1), TimeNs: int64(len(out)) * 1000,
			Op: trace.Op(d[0] % 12), Layer: trace.Layer(d[1] % 3), Memory: trace.Memory(d[2] % 4),
			PID: uint32(d[9] % 3), Device: int32(d[9]%2) - 1, Stream: uint64(d[10] % 3),
			DurationNs: int64(binary.LittleEndian.Uint16(d[6:8])) * int64(d[11]), Function: "cudaMalloc"}
		if d[3]%7 == 0 {
			e.Result = 2
		}
		shift := d[4] % 64
		e.Size = uint64(d[5]) << shift
		e.Address = uint64(d[8]%16) * 4096
		if e.Op == trace.OpFree {
			e.Function = "cudaFree"
		}
		out = append(out, e)
	}
	return out
}

// FuzzAnalyze feeds arbitrary event sequences through every stage: it must never panic, and
// live bytes must never exceed what was allocated.
func FuzzAnalyze(f *testing.F) {
	f.Add([]byte{})
	seed := make([]byte, 0, 12*len(handmade()))
	for _, e := range handmade() {
		seed = append(seed, byte(e.Op), byte(e.Layer), byte(e.Memory), 1, 0, byte(e.Size), 10, 0,
			byte(e.Address>>12), 0, 0, 1)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		events := eventsFromBytes(data)
		r, err := Analyze([]Input{fakeInput("fuzz", events)}, Options{Capacity: 1 << 30})
		if len(events) == 0 {
			if err == nil {
				t.Fatal("empty trace accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		s := r.Combined.Requests
		if s.PeakLiveBytes > s.AllocBytes || s.EndLiveBytes > s.PeakLiveBytes {
			t.Fatalf("live bytes: peak %d end %d allocated %d", s.PeakLiveBytes, s.EndLiveBytes, s.AllocBytes)
		}
	})
}
