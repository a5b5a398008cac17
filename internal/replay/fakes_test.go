package replay

import (
	"fmt"
	"io"

	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// sliceSource serves events in batches of batch events.
type sliceSource struct {
	events []trace.Event
	batch  int
	err    error // returned after the events instead of io.EOF
}

func (s *sliceSource) Next() ([]trace.Event, error) {
	if len(s.events) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	n := min(max(s.batch, 1), len(s.events))
	b := s.events[:n]
	s.events = s.events[n:]
	return b, nil
}

// traceBuilder makes events with increasing seq.
type traceBuilder struct{ events []trace.Event }

func (b *traceBuilder) add(e trace.Event) *traceBuilder {
	e.Seq = uint64(len(b.events))
	e.TimeNs = int64(len(b.events)) * 1000
	b.events = append(b.events, e)
	return b
}

func (b *traceBuilder) alloc(addr, size, stream uint64) *traceBuilder {
	return b.add(trace.Event{Op: trace.OpAlloc, Address: addr, Size: size, Stream: stream, PID: 1, Function: "cudaMalloc"})
}

func (b *traceBuilder) free(addr, stream uint64) *traceBuilder {
	return b.add(trace.Event{Op: trace.OpFree, Address: addr, Stream: stream, PID: 1, Function: "cudaFree"})
}

func (b *traceBuilder) extract(t interface{ Fatalf(string, ...any) }) *Trace {
	tr, err := Extract(&sliceSource{events: b.events, batch: 3})
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	return tr
}

// vclock is a virtual clock: fakes advance it by what their calls cost, so latencies are exact.
type vclock struct{ now int64 }

func (c *vclock) read() int64 { return c.now }

// simBackend is a Backend over a simulated address space with fixed call costs on a vclock.
// Touch and Check remember the pattern of each touched block start.
type simBackend struct {
	clock                      *vclock
	reserveNs, releaseNs       int64
	asyncAllocNs, asyncFreeNs  int64
	syncNs                     int64 // cost of Synchronize
	capacity, used             uint64
	next                       uint64
	regions                    map[uint64]uint64 // Reserve'd address → size
	asyncBlocks                map[uint64]uint64 // AllocAsync'd address → size
	asyncFree                  map[Stream]map[uint64][]uint64
	asyncHeld, asyncHigh       uint64
	streams                    Stream
	liveStreams                int
	patterns                   map[uint64]byte
	leakOnRelease              uint64 // bytes of each Release that are never given back
	reserveCalls, releaseCalls int
	syncs                      int // Synchronize calls
}

func newSimBackend(clock *vclock, capacity uint64) *simBackend {
	return &simBackend{clock: clock, reserveNs: 1000, releaseNs: 800, asyncAllocNs: 100, asyncFreeNs: 50, syncNs: 5000,
		capacity: capacity, next: 1 << 32, regions: map[uint64]uint64{}, asyncBlocks: map[uint64]uint64{},
		asyncFree: map[Stream]map[uint64][]uint64{}, patterns: map[uint64]byte{}}
}

func (s *simBackend) Name() string        { return "sim" }
func (s *simBackend) IsHost() bool        { return true }
func (s *simBackend) Description() string { return "backend sim: simulated addresses" }

func (s *simBackend) take(size uint64) (uint64, error) {
	if size > s.capacity-s.used {
		return 0, fmt.Errorf("sim: %d bytes: %w", size, pool.ErrOutOfMemory)
	}
	addr := s.next
	s.next += (size + 4095) / 4096 * 4096
	s.used += size
	return addr, nil
}

func (s *simBackend) Reserve(size uint64) (uint64, error) {
	s.clock.now += s.reserveNs
	s.reserveCalls++
	addr, err := s.take(size)
	if err == nil {
		s.regions[addr] = size
	}
	return addr, err
}

func (s *simBackend) Release(addr, size uint64) error {
	s.clock.now += s.releaseNs
	s.releaseCalls++
	if got, ok := s.regions[addr]; !ok || got != size {
		return fmt.Errorf("sim: release %#x+%d: %w", addr, size, pool.ErrUnknownAddress)
	}
	delete(s.regions, addr)
	s.used -= size - min(size, s.leakOnRelease)
	return nil
}

func (s *simBackend) CreateStream() (Stream, error) {
	s.streams++
	s.liveStreams++
	s.asyncFree[s.streams] = map[uint64][]uint64{}
	return s.streams, nil
}

func (s *simBackend) DestroyStream(st Stream) error {
	s.liveStreams--
	free := s.asyncFree[st]
	delete(s.asyncFree, st)
	if s.asyncFree[0] == nil {
		s.asyncFree[0] = map[uint64][]uint64{}
	}
	for size, addrs := range free {
		s.asyncFree[0][size] = append(s.asyncFree[0][size], addrs...)
	}
	return nil
}

func (s *simBackend) AllocAsync(size uint64, st Stream) (uint64, error) {
	s.clock.now += s.asyncAllocNs
	if l := s.asyncFree[st][size]; len(l) > 0 {
		s.asyncFree[st][size] = l[:len(l)-1]
		return l[len(l)-1], nil
	}
	addr, err := s.take(size)
	if err != nil {
		return 0, err
	}
	s.asyncBlocks[addr] = size
	s.asyncHeld += size
	s.asyncHigh = max(s.asyncHigh, s.asyncHeld)
	return addr, nil
}

func (s *simBackend) FreeAsync(addr uint64, st Stream) error {
	s.clock.now += s.asyncFreeNs
	size, ok := s.asyncBlocks[addr]
	if !ok {
		return fmt.Errorf("sim: free async %#x: %w", addr, pool.ErrUnknownAddress)
	}
	s.asyncFree[st][size] = append(s.asyncFree[st][size], addr)
	return nil
}

func (s *simBackend) Synchronize() error {
	s.clock.now += s.syncNs
	s.syncs++
	return nil
}

func (s *simBackend) AsyncPoolReserved() (uint64, uint64, error) {
	return s.asyncHeld, s.asyncHigh, nil
}

func (s *simBackend) ResetAsyncPool() error {
	for _, free := range s.asyncFree {
		for size, addrs := range free {
			for _, a := range addrs {
				delete(s.asyncBlocks, a)
				s.asyncHeld -= size
				s.used -= size
			}
			delete(free, size)
		}
	}
	s.asyncHigh = s.asyncHeld
	return nil
}

func (s *simBackend) MemGetInfo() (uint64, uint64, error) {
	return s.capacity - s.used, s.capacity, nil
}

func (s *simBackend) Touch(addr, size uint64, pattern byte) error {
	s.patterns[addr] = pattern
	return nil
}

func (s *simBackend) Check(addr, size uint64, pattern byte) error {
	if got := s.patterns[addr]; got != pattern {
		return fmt.Errorf("sim: %#x holds %#x, want %#x", addr, got, pattern)
	}
	return nil
}

func (s *simBackend) Close() error { return nil }

// rawAllocator is the test's model of pool.PolicyRaw: every request straight to the Upstream.
type rawAllocator struct {
	up    pool.Upstream
	sizes map[uint64]uint64
	stats pool.Stats
}

func newRawAllocator(_ pool.Config, up pool.Upstream) (pool.Allocator, error) {
	return &rawAllocator{up: up, sizes: map[uint64]uint64{}}, nil
}

func (a *rawAllocator) Alloc(size, _ uint64) (uint64, error) {
	addr, err := a.up.Reserve(size)
	if err != nil {
		a.stats.Failures++
		a.stats.UpstreamFailures++
		return 0, err
	}
	a.sizes[addr] = size
	s := &a.stats
	s.Allocs++
	s.UpstreamReserves++
	s.LiveBytes += size
	s.PeakLiveBytes = max(s.PeakLiveBytes, s.LiveBytes)
	s.BlockBytes, s.PeakBlockBytes = s.LiveBytes, s.PeakLiveBytes
	s.ReservedBytes += size
	s.PeakReservedBytes = max(s.PeakReservedBytes, s.ReservedBytes)
	return addr, nil
}

func (a *rawAllocator) Free(addr, _ uint64) error {
	size, ok := a.sizes[addr]
	if !ok {
		return pool.ErrUnknownAddress
	}
	delete(a.sizes, addr)
	if err := a.up.Release(addr, size); err != nil {
		return err
	}
	s := &a.stats
	s.Frees++
	s.UpstreamReleases++
	s.LiveBytes -= size
	s.BlockBytes = s.LiveBytes
	s.ReservedBytes -= size
	return nil
}

func (a *rawAllocator) Stats() pool.Stats     { return a.stats }
func (a *rawAllocator) PeakStats() pool.Stats { return a.stats }
func (a *rawAllocator) Close() error          { return nil }

// chunkAllocator is a tiny pool for the engine's tests: it reserves regions of chunk bytes, carves
// blocks from the newest region bump-style, and reuses freed blocks of the same size.
type chunkAllocator struct {
	rawAllocator
	chunk      uint64
	cur, left  uint64
	freeBySize map[uint64][]uint64
	regions    []uint64
	clock      *vclock
	opNs       int64
}

func (c *chunkAllocator) Alloc(size, _ uint64) (uint64, error) {
	c.clock.now += c.opNs
	s := &c.stats
	if l := c.freeBySize[size]; len(l) > 0 {
		addr := l[len(l)-1]
		c.freeBySize[size] = l[:len(l)-1]
		c.sizes[addr] = size
		c.count(size)
		return addr, nil
	}
	if size > c.left {
		addr, err := c.up.Reserve(max(c.chunk, size))
		if err != nil {
			s.Failures++
			s.UpstreamFailures++
			return 0, err
		}
		s.UpstreamReserves++
		s.ReservedBytes += max(c.chunk, size)
		s.PeakReservedBytes = max(s.PeakReservedBytes, s.ReservedBytes)
		c.regions = append(c.regions, addr, max(c.chunk, size))
		c.cur, c.left = addr, max(c.chunk, size)
	}
	addr := c.cur
	c.cur += size
	c.left -= size
	c.sizes[addr] = size
	c.count(size)
	return addr, nil
}

func (c *chunkAllocator) count(size uint64) {
	s := &c.stats
	s.Allocs++
	s.LiveBytes += size
	s.PeakLiveBytes = max(s.PeakLiveBytes, s.LiveBytes)
	s.BlockBytes, s.PeakBlockBytes = s.LiveBytes, s.PeakLiveBytes
}

func (c *chunkAllocator) Free(addr, _ uint64) error {
	c.clock.now += c.opNs
	size, ok := c.sizes[addr]
	if !ok {
		return pool.ErrUnknownAddress
	}
	delete(c.sizes, addr)
	c.freeBySize[size] = append(c.freeBySize[size], addr)
	c.stats.Frees++
	c.stats.LiveBytes -= size
	c.stats.BlockBytes = c.stats.LiveBytes
	return nil
}

func (c *chunkAllocator) Close() error {
	for i := 0; i < len(c.regions); i += 2 {
		if err := c.up.Release(c.regions[i], c.regions[i+1]); err != nil {
			return err
		}
		c.stats.UpstreamReleases++
		c.stats.ReservedBytes -= c.regions[i+1]
	}
	c.regions = nil
	return nil
}

// testAllocators returns a NewAllocator that builds rawAllocator for the raw policy and a
// chunkAllocator of chunk bytes costing opNs per call otherwise.
func testAllocators(clock *vclock, chunk uint64, opNs int64) func(pool.Config, pool.Upstream) (pool.Allocator, error) {
	return func(cfg pool.Config, up pool.Upstream) (pool.Allocator, error) {
		if cfg.Policy == pool.PolicyRaw {
			return newRawAllocator(cfg, up)
		}
		return &chunkAllocator{rawAllocator: rawAllocator{up: up, sizes: map[uint64]uint64{}},
			chunk: chunk, freeBySize: map[uint64][]uint64{}, clock: clock, opNs: opNs}, nil
	}
}
