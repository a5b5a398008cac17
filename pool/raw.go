package pool

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/internal/addrindex"
)

// rawPool is PolicyRaw: every block is its own Upstream region.
type rawPool struct {
	base
	align  uint64
	blocks *addrindex.Index[block]
}

func newRaw(cfg Config, up Upstream, o options) *rawPool {
	p := &rawPool{align: cfg.alignment(), blocks: addrindex.New[block]()}
	p.init(up, o)
	return p
}

// Alloc reserves the request rounded up to the alignment straight from the Upstream.
func (p *rawPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(size); err != nil {
		return 0, err
	}
	blk := AlignUp(max(size, 1), p.align)
	addr, err := p.up.reserve(blk)
	if err != nil {
		p.c.failed()
		return 0, fmt.Errorf("alloc %d bytes: %w", size, err)
	}
	p.blocks.Put(addr, block{req: size, size: blk, seg: addr, stream: stream})
	p.c.allocated(size, blk)
	return addr, nil
}

// Free releases the block's region to the Upstream.
func (p *rawPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("free")
	}
	bp := p.blocks.Get(addr)
	if bp == nil {
		return errUnknown(addr)
	}
	b := *bp
	if err := p.up.release(addr, b.size); err != nil {
		return fmt.Errorf("free %#x: %w", addr, err)
	}
	p.blocks.Take(addr)
	p.c.freed(b.req, b.size)
	return nil
}

// Close releases the regions of all blocks still live, in address order.
func (p *rawPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, addr := range p.blocks.SortedAddrs() {
			errs = append(errs, p.up.release(addr, p.blocks.Get(addr).size))
		}
		return errors.Join(errs...)
	})
}
