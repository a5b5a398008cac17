package pool

import (
	"fmt"
	"sync"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
)

// TestConcurrentUse runs goroutines that allocate, write down and free blocks on their own
// streams at once (run it with -race): afterwards every block was returned exactly once and
// no two live blocks ever shared an address.
func TestConcurrentUse(t *testing.T) {
	const workers, rounds = 4, 400
	for name, cfg := range propertyConfigs() {
		t.Run(name, func(t *testing.T) {
			up := poolsim.NewUpstream(0, 256)
			a, err := New(cfg, up)
			if err != nil {
				t.Fatal(err)
			}
			var owners sync.Map // address → worker holding it
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- hammer(a, &owners, uint64(w), rounds)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			s := a.Stats()
			if s.Allocs != workers*rounds || s.Frees != s.Allocs || s.LiveBytes != 0 || s.BlockBytes != 0 || s.Failures != 0 {
				t.Fatalf("Stats after all frees = %+v", s)
			}
			closeEmpty(t, a, up)
		})
	}
}

// hammer allocates rounds blocks of varied sizes on stream w, keeping up to 8 live, and frees them all.
func hammer(a Allocator, owners *sync.Map, w uint64, rounds int) error {
	var live []uint64
	for i := range rounds {
		size := uint64(1+i%7) * (1 << (4 * (i % 5))) // 1 B … 7 MiB
		addr, err := a.Alloc(size, w)
		if err != nil {
			return err
		}
		if prev, taken := owners.LoadOrStore(addr, w); taken {
			return fmt.Errorf("worker %d got %#x, live in worker %d", w, addr, prev)
		}
		live = append(live, addr)
		if len(live) > 8 || i == rounds-1 {
			for _, x := range live {
				owners.Delete(x)
				if err := a.Free(x, w); err != nil {
					return err
				}
			}
			live = live[:0]
		}
	}
	return nil
}
