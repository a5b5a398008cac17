// Package requeststest makes request streams for tests: random sequences that exercise every path
// of an allocator (many sizes, three streams, frees by synchronizing calls and not, sync points).
package requeststest

import (
	"math/rand/v2"
	"slices"

	"github.com/allocscope/allocscope/internal/requests"
)

// RandomOps returns n requests drawn from seed: allocations of 1 byte to 2<<maxLog2 bytes on three
// streams, frees of random live blocks (half of them by a synchronizing call, like cudaFree), and
// now and then an op that is only a sync point; and the three streams' handles.
func RandomOps(seed uint64, n, maxLog2 int) ([]requests.Op, []uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	var live, free []uint32
	next := uint32(0)
	ops := make([]requests.Op, 0, n)
	for len(ops) < n {
		stream := uint32(r.IntN(3))
		switch {
		case r.IntN(100) == 0:
			ops = append(ops, requests.NewOp(0, requests.NoSlot, stream, true))
		case len(live) > 0 && r.IntN(2) == 0:
			i := r.IntN(len(live))
			free = append(free, live[i])
			ops = append(ops, requests.NewOp(0, live[i], stream, r.IntN(2) == 0))
			live = slices.Delete(live, i, i+1)
		default:
			slot := next
			if len(free) > 0 {
				slot, free = free[len(free)-1], free[:len(free)-1]
			} else {
				next++
			}
			size := uint64(1) << r.IntN(maxLog2)
			live = append(live, slot)
			ops = append(ops, requests.NewOp(size+r.Uint64N(size), slot, stream, false))
		}
	}
	return ops, []uint64{0, 0x7f01, 0x7f02}
}
