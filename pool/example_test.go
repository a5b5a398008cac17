package pool_test

import (
	"fmt"
	"log"

	"github.com/allocscope/allocscope/pool"
)

// deviceMemory stands in for the GPU: a Go CUDA program gives the pool an Upstream whose Reserve
// is cuMemAlloc and whose Release is cuMemFree (gorgonia.org/cu: cu.MemAlloc, cu.MemFree; or the
// CUDA backend of package internal/replay/backend/cuda, which also maps pages for the paged arena). Here it hands out
// addresses from a counter, so the example runs anywhere.
type deviceMemory struct {
	next     uint64
	reserves int
}

func (d *deviceMemory) Reserve(size uint64) (uint64, error) {
	addr := d.next
	d.next += size
	d.reserves++
	return addr, nil
}

func (d *deviceMemory) Release(addr, size uint64) error { return nil }

// The pool that `analyze --emit-config pool.json` recommends, in a Go program: LoadConfig reads
// pool.json, New builds the allocator over the program's Upstream, and every allocation after that is
// served from the memory the pool reserved at New, without a cuMemAlloc.
func Example() {
	cfg, err := pool.LoadConfig("testdata/sizeclass.json")
	if err != nil {
		log.Fatal(err)
	}
	gpu := &deviceMemory{next: 0x7f0000000000}
	a, err := pool.New(cfg, gpu)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	const stream = 0 // the CUstream the block is used on
	x, _ := a.Alloc(3000, stream)
	y, _ := a.Alloc(3000, stream)
	if err := a.Free(x, stream); err != nil {
		log.Fatal(err)
	}
	z, _ := a.Alloc(2500, stream) // the 4 KiB class's slot that x freed
	big, _ := a.Alloc(200<<20, stream)
	s := a.Stats()
	fmt.Printf("y-x %d, z reuses x: %v, big from the arena: %v\n", y-x, z == x, big != 0)
	fmt.Printf("live %d bytes in %d blocks, reserved %d bytes in %d upstream calls, %d fallbacks\n",
		s.LiveBytes, s.LiveBlocks(), s.ReservedBytes, gpu.reserves, s.Fallbacks)
	// Output:
	// y-x 4096, z reuses x: true, big from the arena: true
	// live 209720700 bytes in 3 blocks, reserved 290979840 bytes in 1 upstream calls, 0 fallbacks
}
