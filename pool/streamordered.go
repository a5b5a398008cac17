package pool

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/allocscope/allocscope/internal/addrindex"
	"github.com/allocscope/allocscope/internal/spans"
)

// The stream-ordered model's layout, as bench/mempool_layout.cu measured a CUDA memory pool
// on an H200 (CUDA 13.0, driver 580): blocks are cut from one line of address space, each at the
// start of the smallest free range that holds it, so a block may span the steps in which memory is
// mapped; freed ranges merge with their neighbours.
const (
	// StreamOrderedStepBytes is the memory a CUDA pool maps at a time, and PolicyStreamOrdered's
	// Map and Unmap calls: 32 MiB.
	StreamOrderedStepBytes = 32 << 20
	streamOrderedStep      = StreamOrderedStepBytes
	// streamOrderedAddressSpace is the address space the model reserves at a time (1 TiB); a
	// block larger than what is left takes a reservation of its own size.
	streamOrderedAddressSpace = 1 << 40
)

// streamOrderedPool is PolicyStreamOrdered, a model of a cudaMallocAsync memory pool:
//
//   - A request is rounded up to the alignment and placed best fit (smallest free range, lowest
//     address) in the pool's address space; free memory past the last block is one range, so a
//     request that fits nowhere else extends the pool at its end.
//   - Memory is mapped from the Upstream (a Mapper) in 32 MiB steps: a block maps the steps it
//     touches that are not mapped yet. Reserved memory is the mapped steps.
//   - Free makes the block's range free at once, for every stream: CUDA's pools reuse memory
//     freed on another stream by default (cudaMemPoolReuseAllowOpportunistic and
//     ...InternalDependencies), and the measurement shows it.
//   - Sync (a synchronization point) unmaps steps that hold no live block, highest address first,
//     while more than ReleaseThresholdBytes are mapped.
//   - When the Upstream is out of memory, every step without a live block is unmapped and the
//     mapping tried once more, as the driver trims a pool before failing.
type streamOrderedPool struct {
	base
	sp        *spans.Space
	mapper    Mapper
	vas       map[uint64]*soReservation // address reservations by base address
	blocks    *addrindex.Index[block]
	align     uint64
	threshold uint64
	idle      []soStepRef // steps that had no live block when last looked at (some may have one now)
	mapErr    error       // why the Upstream is not a Mapper; Alloc fails with it
}

// soReservation is one reservation of address space and the state of its 32 MiB steps.
type soReservation struct {
	addr, size uint64
	head       int32    // its first node in sp
	steps      []soStep // the steps from the first up to the highest ever touched
}

// soStep is one 32 MiB step of a reservation.
type soStep struct {
	live   uint32 // live blocks that touch it
	mapped bool   // memory is mapped there
	listed bool   // in the pool's idle list
}

// soStepRef names step i of the reservation at base.
type soStepRef struct {
	base uint64
	i    int
}

func newStreamOrdered(cfg Config, up Upstream, o options) *streamOrderedPool {
	p := &streamOrderedPool{
		sp:     spans.NewSpace(),
		vas:    map[uint64]*soReservation{},
		blocks: addrindex.New[block](),
		align:  cfg.alignment(),
	}
	if cfg.StreamOrdered != nil {
		p.threshold = cfg.StreamOrdered.ReleaseThresholdBytes
	}
	if m, ok := up.(Mapper); ok {
		p.mapper = m
	} else {
		p.mapErr = fmt.Errorf("the stream-ordered model needs an upstream that maps pages (a pool.Mapper); %T is not one", up)
	}
	p.init(up, o)
	return p
}

// Alloc places a block best fit, mapping the steps it touches that are not mapped.
func (p *streamOrderedPool) Alloc(size, stream uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(size); err != nil {
		return 0, err
	}
	blk := AlignUp(max(size, 1), p.align)
	id, err := p.place(blk)
	if err == nil {
		n := *p.sp.Node(id)
		if err = p.cover(p.vas[n.Seg], n.Addr, blk); err != nil {
			p.sp.Release(id, false, 0)
		}
	}
	if err != nil {
		p.c.failed()
		return 0, fmt.Errorf("alloc %d bytes on stream %#x: %w", size, stream, err)
	}
	n := p.sp.Node(id)
	p.blocks.Put(n.Addr, block{req: size, size: blk, seg: n.Seg, stream: stream, node: id})
	p.c.allocated(size, blk)
	return n.Addr, nil
}

// place takes blk bytes from the smallest free range that holds them, reserving more address
// space when none does, and returns the block's node.
func (p *streamOrderedPool) place(blk uint64) (int32, error) {
	id, ok := p.sp.BestFit(false, 0, blk)
	if !ok {
		if p.mapErr != nil {
			return spans.NoNode, p.mapErr
		}
		size := max(streamOrderedAddressSpace, AlignUp(blk, streamOrderedStep))
		addr, err := p.mapper.ReserveAddress(size)
		if err != nil {
			return spans.NoNode, fmt.Errorf("reserve %d bytes of address space: %w", size, err)
		}
		id = p.sp.AddSegment(addr, size, false, 0, spans.NodeFree)
		p.vas[addr] = &soReservation{addr: addr, size: size, head: id}
	}
	p.sp.Take(id, blk)
	return id, nil
}

// cover counts a new block of size bytes at addr in the steps it touches and maps those that are
// not mapped, in runs. When that fails, nothing is left counted or newly mapped.
func (p *streamOrderedPool) cover(r *soReservation, addr, size uint64) error {
	first, last := r.stepsOf(addr, size)
	for i := first; i <= last; i++ {
		r.steps[i].live++
	}
	var mapped [][2]int
	for i := first; i <= last; {
		if r.steps[i].mapped {
			i++
			continue
		}
		j := i + 1
		for j <= last && !r.steps[j].mapped {
			j++
		}
		if err := p.mapSteps(r, i, j); err != nil {
			p.uncover(r, first, last, mapped)
			return err
		}
		mapped = append(mapped, [2]int{i, j})
		i = j
	}
	return nil
}

// uncover takes back what a failed cover counted and mapped.
func (p *streamOrderedPool) uncover(r *soReservation, first, last int, mapped [][2]int) {
	for i := first; i <= last; i++ {
		r.steps[i].live--
	}
	for _, run := range mapped {
		// The memory was mapped a moment ago; were it refused back, the step would stay mapped
		// and idle, and the next trim would try again.
		if p.unmapSteps(r, run[0], run[1]) != nil {
			for i := run[0]; i < run[1]; i++ {
				p.listIdle(r, i)
			}
		}
	}
}

// stepsOf returns the first and last step that [addr, addr+size) touches, growing r.steps to
// hold them.
func (r *soReservation) stepsOf(addr, size uint64) (int, int) {
	first := int((addr - r.addr) / streamOrderedStep)
	last := int((addr + size - 1 - r.addr) / streamOrderedStep)
	if last >= len(r.steps) {
		r.steps = append(r.steps, make([]soStep, last+1-len(r.steps))...)
	}
	return first, last
}

// mapSteps maps steps [i, j) of r; when the Upstream is out of memory it unmaps every idle step
// and tries once more.
func (p *streamOrderedPool) mapSteps(r *soReservation, i, j int) error {
	addr, size := r.addr+uint64(i)*streamOrderedStep, uint64(j-i)*streamOrderedStep
	err := p.up.mapPages(p.mapper, addr, size)
	if err != nil && isOOM(err) {
		if terr := p.trim(0); terr != nil {
			return errors.Join(err, terr)
		}
		err = p.up.mapPages(p.mapper, addr, size)
	}
	if err != nil {
		return err
	}
	for k := i; k < j; k++ {
		r.steps[k].mapped = true
	}
	return nil
}

// unmapSteps unmaps steps [i, j) of r.
func (p *streamOrderedPool) unmapSteps(r *soReservation, i, j int) error {
	addr, size := r.addr+uint64(i)*streamOrderedStep, uint64(j-i)*streamOrderedStep
	if err := p.up.unmapPages(p.mapper, addr, size); err != nil {
		return err
	}
	for k := i; k < j; k++ {
		r.steps[k].mapped = false
	}
	return nil
}

// listIdle puts step i of r on the idle list unless it is there.
func (p *streamOrderedPool) listIdle(r *soReservation, i int) {
	if !r.steps[i].listed {
		r.steps[i].listed = true
		p.idle = append(p.idle, soStepRef{base: r.addr, i: i})
	}
}

// Free makes the block's range free for every stream.
func (p *streamOrderedPool) Free(addr, stream uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.takeLive(p.blocks, addr)
	if err != nil {
		return err
	}
	r := p.vas[b.seg]
	first, last := r.stepsOf(addr, b.size)
	for i := first; i <= last; i++ {
		if r.steps[i].live--; r.steps[i].live == 0 {
			p.listIdle(r, i)
		}
	}
	p.sp.Release(b.node, false, 0)
	p.c.freed(b.req, b.size)
	return nil
}

// Sync unmaps steps without a live block while more than the release threshold is mapped.
func (p *streamOrderedPool) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed("sync")
	}
	return p.trim(p.threshold)
}

// trim unmaps mapped steps without a live block, highest address first, while more than keep
// bytes are mapped, and forgets the idle steps it no longer needs to look at.
func (p *streamOrderedPool) trim(keep uint64) error {
	if len(p.idle) == 0 || p.c.s.ReservedBytes <= keep {
		return nil
	}
	idle := p.idle[:0]
	for _, s := range p.idle {
		st := &p.vas[s.base].steps[s.i]
		if st.live == 0 && st.mapped {
			idle = append(idle, s)
		} else {
			st.listed = false
		}
	}
	p.idle = idle
	if keep > 0 {
		slices.SortFunc(idle, func(a, b soStepRef) int { return cmp.Or(cmp.Compare(a.base, b.base), cmp.Compare(a.i, b.i)) })
	}
	var errs []error
	var kept []soStepRef // steps the Upstream refused to unmap
	i := len(idle)
	for i > 0 && p.c.s.ReservedBytes > keep {
		i--
		s := idle[i]
		if err := p.unmapSteps(p.vas[s.base], s.i, s.i+1); err != nil {
			errs, kept = append(errs, err), append(kept, s)
			continue
		}
		p.vas[s.base].steps[s.i].listed = false
	}
	p.idle = append(idle[:i], kept...)
	return errors.Join(errs...)
}

// mappedRuns returns the runs [i, j) of r's mapped steps, in order.
func (r *soReservation) mappedRuns() [][2]int {
	var out [][2]int
	for i := 0; i < len(r.steps); {
		j := i
		for j < len(r.steps) && r.steps[j].mapped {
			j++
		}
		if j > i {
			out = append(out, [2]int{i, j})
		}
		i = j + 1
	}
	return out
}

// Close unmaps every mapped step and releases the address space.
func (p *streamOrderedPool) Close() error {
	return p.closeOnce(func() error {
		var errs []error
		for _, addr := range sortedKeys(p.vas) {
			r := p.vas[addr]
			for _, m := range r.mappedRuns() {
				errs = append(errs, p.unmapSteps(r, m[0], m[1]))
			}
			errs = append(errs, p.mapper.ReleaseAddress(r.addr, r.size))
		}
		return errors.Join(errs...)
	})
}
