// Package synth generates synthetic allocation traces on the fly, for benchmarks: a training-like
// loop of allocations and frees over a bounded live set, in constant memory.
package synth

import (
	"io"

	"github.com/allocscope/allocscope/trace"
)

const batchSize = 8192

// sizes are the request sizes drawn from: small tensors, activations and a few large buffers.
var sizes = []uint64{256, 512, 1000, 2048, 4096, 8192, 12288, 65536, 100000, 262144, 524288,
	1 << 20, 3 << 20, 4 << 20, 6<<20 + 512, 8 << 20, 16 << 20, 24 << 20, 32 << 20, 64 << 20}

// Source yields Events events; every run with the same count is identical.
type Source struct {
	Events  uint64
	MaxLive int // bound on simultaneously live blocks (default 256)
	done    uint64
	rng     uint64
	buf     []trace.Event
	live    []block
	free    []uint64 // addresses to reuse
	next    uint64
}

type block struct{ addr, size uint64 }

// New returns a source of n events.
func New(n uint64) *Source { return &Source{Events: n} }

func (s *Source) rand() uint64 {
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	return s.rng
}

// Next returns the next batch of events, io.EOF after the last.
func (s *Source) Next() ([]trace.Event, error) {
	if s.rng == 0 {
		s.rng, s.next = 0x2545f4914f6cdd1d, 0x7f0000000000
		if s.MaxLive == 0 {
			s.MaxLive = 256
		}
		s.buf = make([]trace.Event, batchSize)
	}
	n := min(uint64(batchSize), s.Events-s.done)
	if n == 0 {
		return nil, io.EOF
	}
	for i := range s.buf[:n] {
		s.event(&s.buf[i])
	}
	return s.buf[:n], nil
}

func (s *Source) event(e *trace.Event) {
	s.done++
	*e = trace.Event{Seq: s.done, TimeNs: int64(s.done) * 1000, PID: 1, TID: 1, Device: 0}
	r := s.rand()
	if len(s.live) > 0 && (len(s.live) >= s.MaxLive || r%100 < 49) {
		i := int(r>>8) % len(s.live)
		b := s.live[i]
		s.live[i] = s.live[len(s.live)-1]
		s.live = s.live[:len(s.live)-1]
		s.free = append(s.free, b.addr)
		e.Op, e.Address, e.Size, e.Function, e.DurationNs = trace.OpFree, b.addr, b.size, "cudaFree", 3000
		return
	}
	size := sizes[(r>>16)%uint64(len(sizes))]
	var addr uint64
	if len(s.free) > 0 {
		addr = s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
	} else {
		addr = s.next
		s.next += 128 << 20
	}
	s.live = append(s.live, block{addr, size})
	e.Op, e.Address, e.Size, e.Function, e.DurationNs = trace.OpAlloc, addr, size, "cudaMalloc", int64(5000+size>>10)
	e.Callsite = 0x400000 + (r>>32)%64*16
}
