package pool

import "fmt"

// bestFitPool is PolicyBestFit: one arena, like RMM's pool_memory_resource.
type bestFitPool struct {
	base
	arena *arena
}

func newBestFit(cfg Config, up Upstream, o options) (*bestFitPool, error) {
	bf := BestFitConfig{}
	if cfg.BestFit != nil {
		bf = *cfg.BestFit
	}
	p := &bestFitPool{}
	p.init(up, o)
	p.arena = newArena(&p.up, cfg.alignment(), bf.GrowBytes, bf.MaximumBytes, false, bf.Fit)
	if bf.InitialBytes > 0 {
		if err := p.arena.reserveInitial(AlignUp(bf.InitialBytes, cfg.alignment())); err != nil {
			return nil, fmt.Errorf("reserve the initial %d bytes: %w", bf.InitialBytes, err)
		}
	}
	p.c.notePeak()
	return p, nil
}

// Alloc returns the lowest-addressed smallest free block that fits, growing the arena if none does.
func (p *bestFitPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	addr, err := p.alloc(size, stream)
	p.mu.Unlock()
	return addr, err
}

func (p *bestFitPool) alloc(size, stream uint64) (uint64, error) {
	if err := p.admit(size); err != nil {
		return 0, err
	}
	addr, blk, err := p.arena.alloc(size, stream)
	if err != nil {
		p.c.failed()
		return 0, fmt.Errorf("alloc %d bytes: %w", size, err)
	}
	p.c.allocated(size, blk)
	return addr, nil
}

// Free returns the block at addr to the arena, merging it with free neighbours.
func (p *bestFitPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	err := p.free(addr, stream)
	p.mu.Unlock()
	return err
}

func (p *bestFitPool) free(addr, stream uint64) error {
	if p.closed {
		return errClosed("free")
	}
	req, blk, ok := p.arena.free(addr, stream)
	if !ok {
		return errUnknown(addr)
	}
	p.c.freed(req, blk)
	return nil
}

// Close releases every region.
func (p *bestFitPool) Close() error {
	return p.closeOnce(func() error {
		return p.arena.close()
	})
}
