package analysis

import (
	"io"

	"github.com/allocscope/allocscope/trace"
)

// fakeSource serves events from memory in batches of batch events.
type fakeSource struct {
	events []trace.Event
	batch  int
	pos    int
}

func (f *fakeSource) Next() ([]trace.Event, error) {
	if f.pos >= len(f.events) {
		return nil, io.EOF
	}
	end := min(f.pos+f.batch, len(f.events))
	b := f.events[f.pos:end]
	f.pos = end
	return b, nil
}

func fakeInput(name string, events []trace.Event) Input {
	return Input{Name: name, Open: func() (Source, error) {
		return &fakeSource{events: events, batch: 3}, nil
	}}
}

// builder writes hand-made traces: one process, device 0, stream 0, native cudaMalloc/cudaFree.
type builder struct {
	events []trace.Event
	seq    uint64
	time   int64
}

func (b *builder) add(e trace.Event) *builder {
	b.seq++
	b.time += 1000
	e.Seq, e.TimeNs = b.seq, b.time
	if e.PID == 0 {
		e.PID = 100
	}
	if e.Function == "" {
		e.Function = map[trace.Op]string{trace.OpAlloc: "cudaMalloc", trace.OpFree: "cudaFree"}[e.Op]
	}
	b.events = append(b.events, e)
	return b
}

func (b *builder) alloc(addr, size uint64, dur int64) *builder {
	return b.add(trace.Event{Op: trace.OpAlloc, Address: addr, Size: size, DurationNs: dur, Callsite: 0x400000 + addr&0xfff})
}

func (b *builder) free(addr uint64, dur int64) *builder {
	return b.add(trace.Event{Op: trace.OpFree, Address: addr, DurationNs: dur, Callsite: 0x500000})
}
