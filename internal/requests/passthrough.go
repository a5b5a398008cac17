package requests

import (
	"slices"

	"github.com/allocscope/allocscope/trace"
)

// WithoutSizes appends to kept the events of b but the device allocations and frees of the sizes in
// sizes (it returns b itself when sizes is empty). They are the requests record --pool sends to CUDA
// (pool.Config.PassThroughSizes): the pool never sees them, so its sizing, its simulations and its
// replay leave them out.
func WithoutSizes(b []trace.Event, sizes []uint64, kept []trace.Event) []trace.Event {
	if len(sizes) == 0 {
		return b
	}
	for i := range b {
		e := &b[i]
		if e.Memory == trace.MemoryDevice && (e.Op == trace.OpAlloc || e.Op == trace.OpFree) &&
			slices.Contains(sizes, e.Size) {
			continue
		}
		kept = append(kept, *e)
	}
	return kept
}

// SourceWithoutSizes is src without the events WithoutSizes leaves out.
func SourceWithoutSizes(src Source, sizes []uint64) Source {
	if len(sizes) == 0 {
		return src
	}
	return &sizeFilter{src: src, sizes: sizes}
}

type sizeFilter struct {
	src   Source
	sizes []uint64
	kept  []trace.Event
}

// Next returns the next batch of the source, filtered.
func (f *sizeFilter) Next() ([]trace.Event, error) {
	b, err := f.src.Next()
	f.kept = WithoutSizes(b, f.sizes, f.kept[:0])
	return f.kept, err
}
