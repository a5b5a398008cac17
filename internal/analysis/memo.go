package analysis

import (
	"io"

	"github.com/allocscope/allocscope/trace"
)

// memoBatch is the batch size of a memorized source.
const memoBatch = 4096

// memoSource copies the events of a source as they are read, so that a later replay of the events
// reads them from memory. analyzeStream uses it for PyTorch snapshots analyzed within a capacity,
// whose out-of-memory replay (explainModelOOM) would otherwise unpickle the file again; every
// other pass reads the request log.
type memoSource struct {
	Source
	events []trace.Event
}

func (m *memoSource) Next() ([]trace.Event, error) {
	b, err := m.Source.Next()
	m.events = append(m.events, b...)
	return b, err
}

// opener returns an opener of the events read so far, each pass getting its own source.
func (m *memoSource) opener() opener {
	events := m.events
	return func() (Source, error) { return &eventSlice{events: events}, nil }
}

// eventSlice serves events held in memory.
type eventSlice struct {
	events []trace.Event
	pos    int
}

func (s *eventSlice) Next() ([]trace.Event, error) {
	if s.pos >= len(s.events) {
		return nil, io.EOF
	}
	end := min(s.pos+memoBatch, len(s.events))
	b := s.events[s.pos:end]
	s.pos = end
	return b, nil
}

// Callsite names callsites as the memorized source does.
func (m *memoSource) Callsite(pid uint32, id uint64) (trace.Callsite, bool) {
	if n, ok := m.Source.(callsiteNamer); ok {
		return n.Callsite(pid, id)
	}
	return trace.Callsite{}, false
}

// CallsiteProblem says why callsites have no name, as the memorized source does.
func (m *memoSource) CallsiteProblem(unnamed int) string {
	if p, ok := m.Source.(interface{ CallsiteProblem(int) string }); ok {
		return p.CallsiteProblem(unnamed)
	}
	return ""
}
