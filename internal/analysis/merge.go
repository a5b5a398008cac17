package analysis

import (
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/trace"
)

const mergeBatch = 8192

// merged interleaves several sources by event time (then seq), keeping each source's order.
type merged struct {
	srcs  []Source
	heads [][]trace.Event
	done  []bool
	out   []trace.Event
}

func openMerged(inputs []Input) (Source, error) {
	m := &merged{}
	for _, in := range inputs {
		s, err := in.Open()
		if err != nil {
			m.Close()
			return nil, err
		}
		m.srcs = append(m.srcs, s)
	}
	m.heads = make([][]trace.Event, len(m.srcs))
	m.done = make([]bool, len(m.srcs))
	return m, nil
}

// fill makes sure source i has a head batch unless it is exhausted.
func (m *merged) fill(i int) error {
	for len(m.heads[i]) == 0 && !m.done[i] {
		b, err := m.srcs[i].Next()
		m.heads[i] = b
		if errors.Is(err, io.EOF) {
			m.done[i] = len(b) == 0
			if len(b) == 0 {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Next returns events in merged order. It stops a batch as soon as a source's batch runs out, so
// that no event it returns refers to a batch that a source has since replaced.
func (m *merged) Next() ([]trace.Event, error) {
	m.out = m.out[:0]
	for i := range m.srcs {
		if err := m.fill(i); err != nil {
			return nil, err
		}
	}
	for len(m.out) < mergeBatch {
		best := -1
		for i, h := range m.heads {
			if len(h) == 0 {
				continue
			}
			if best < 0 || before(&h[0], &m.heads[best][0]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		m.out = append(m.out, m.heads[best][0])
		m.heads[best] = m.heads[best][1:]
		if len(m.heads[best]) == 0 {
			break
		}
	}
	if len(m.out) == 0 {
		return nil, io.EOF
	}
	return m.out, nil
}

func before(a, b *trace.Event) bool {
	if a.TimeNs != b.TimeNs {
		return a.TimeNs < b.TimeNs
	}
	return a.Seq < b.Seq
}

// Callsite names a callsite with the first source that knows it.
func (m *merged) Callsite(pid uint32, id uint64) (trace.Callsite, bool) {
	for _, s := range m.srcs {
		if n, ok := s.(callsiteNamer); ok {
			if c, ok := n.Callsite(pid, id); ok {
				return c, true
			}
		}
	}
	return trace.Callsite{}, false
}

// CallsiteProblem says why callsites of the sources have no name: each source's line, as
// trace.Reader.CallsiteProblem (unnamed, which the merged source cannot split, goes to the
// sources without modules), the same line once.
func (m *merged) CallsiteProblem(unnamed int) string {
	var lines []string
	for _, s := range m.srcs {
		if p, ok := s.(interface{ CallsiteProblem(int) string }); ok {
			if l := p.CallsiteProblem(unnamed); l != "" && !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
	}
	return strings.Join(lines, "; ")
}

// Warnings returns the warnings of every source.
func (m *merged) Warnings() []string {
	var out []string
	for _, s := range m.srcs {
		if w, ok := s.(interface{ Warnings() []string }); ok {
			out = append(out, w.Warnings()...)
		}
	}
	return out
}

// Close closes every source.
func (m *merged) Close() error {
	var errs []error
	for _, s := range m.srcs {
		if c, ok := s.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
