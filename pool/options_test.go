package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// TestSingleGoroutineSameResults: without locking, every policy gives the same addresses and the
// same Stats for the same calls, on a simulated address space without locking either.
func TestSingleGoroutineSameResults(t *testing.T) {
	for _, c := range benchConfigs() {
		locked, err := New(c.cfg, poolsim.NewUpstream(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		single, err := New(c.cfg, poolsim.NewSingleGoroutineUpstream(0, 0), SingleGoroutine())
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var live []uint64
		for i := range 2000 {
			if len(live) > 0 && rng.IntN(2) == 0 {
				j := rng.IntN(len(live))
				if err := locked.Free(live[j], 0); err != nil {
					t.Fatal(err)
				}
				if err := single.Free(live[j], 0); err != nil {
					t.Fatal(err)
				}
				live[j] = live[len(live)-1]
				live = live[:len(live)-1]
				continue
			}
			size := uint64(1 + rng.IntN(8<<20))
			a, errA := locked.Alloc(size, 0)
			b, errB := single.Alloc(size, 0)
			if a != b || (errA == nil) != (errB == nil) {
				t.Fatalf("%s: alloc %d of %d bytes: %#x %v vs %#x %v", c.name, i, size, a, errA, b, errB)
			}
			if errA == nil {
				live = append(live, a)
			}
		}
		if locked.Stats() != single.Stats() || locked.PeakStats() != single.PeakStats() {
			t.Errorf("%s: stats differ:\n%+v\n%+v", c.name, locked.Stats(), single.Stats())
		}
		if locked.Stats().Allocs < 900 {
			t.Errorf("%s: only %d allocations", c.name, locked.Stats().Allocs)
		}
	}
}
