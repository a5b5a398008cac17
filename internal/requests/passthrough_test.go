package requests

import (
	"io"
	"slices"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// The device allocations and frees of the sizes record --pool sends to CUDA are left out, and
// nothing else: other sizes, other memory, other ops.
func TestWithoutSizes(t *testing.T) {
	b := []trace.Event{
		{Seq: 1, Op: trace.OpAlloc, Size: 1 << 20},
		{Seq: 2, Op: trace.OpAlloc, Size: 4096},
		{Seq: 3, Op: trace.OpAlloc, Size: 1 << 20, Memory: trace.MemoryHost},
		{Seq: 4, Op: trace.OpFree, Size: 1 << 20},
		{Seq: 5, Op: trace.OpOOM, Size: 1 << 20},
	}
	seqs := func(es []trace.Event) (s []uint64) {
		for _, e := range es {
			s = append(s, e.Seq)
		}
		return s
	}
	if got := seqs(WithoutSizes(b, []uint64{1 << 20}, nil)); !slices.Equal(got, []uint64{2, 3, 5}) {
		t.Errorf("kept %v, want [2 3 5]", got)
	}
	if got := WithoutSizes(b, nil, nil); &got[0] != &b[0] {
		t.Error("no sizes: want the batch itself")
	}
	src := SourceWithoutSizes(&sliceSource{batches: [][]trace.Event{b}}, []uint64{4096})
	got, err := src.Next()
	if err != io.EOF || !slices.Equal(seqs(got), []uint64{1, 3, 4, 5}) {
		t.Errorf("source: %v, %v; want [1 3 4 5], EOF", seqs(got), err)
	}
}

// sliceSource serves batches, the last with io.EOF.
type sliceSource struct{ batches [][]trace.Event }

func (s *sliceSource) Next() ([]trace.Event, error) {
	b := s.batches[0]
	s.batches = s.batches[1:]
	if len(s.batches) == 0 {
		return b, io.EOF
	}
	return b, nil
}
