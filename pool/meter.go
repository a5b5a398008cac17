package pool

// UpstreamCounts is what an allocator asked of its Upstream, counted as Stats counts it: a Map counts
// as a reserve and an Unmap as a release of their bytes, a Remap as both with the bytes held
// unchanged; address space holds no memory.
type UpstreamCounts struct {
	Reserves          uint64 // successful Reserve and Map calls (and Remaps)
	Releases          uint64 // successful Release and Unmap calls (and Remaps)
	Remaps            uint64 // successful Remap calls
	ReservedBytes     uint64 // bytes held now
	PeakReservedBytes uint64 // the most bytes held at once
	GainedBytes       uint64 // bytes of all successful Reserve and Map calls
	PageOps           uint64 // pages mapped, unmapped or moved, of MeterOptions.PageBytes each
}

// Call names an Upstream call, for MeterOptions.Cost.
type Call int

// The calls a Meter charges.
const (
	CallReserve Call = iota // Reserve, or the Map of one page
	CallRelease             // Release, or the Unmap of one page
	CallRemap               // the Remap of one page
)

// MeterOptions configure a Meter.
type MeterOptions struct {
	// PageBytes is the page a Map, Unmap or Remap is counted (and charged) in: the granularity a
	// GPU maps memory in (2 MiB on an H200). 0 counts each call as one page.
	PageBytes uint64
	// Cost, when set, is told of every call passed on, as n calls of size bytes each: a Reserve or
	// Release is one call of its size; a Map, Unmap or Remap is one call per page, of at most
	// PageBytes each. analyze adds up estimated durations with it.
	Cost func(c Call, size, n uint64)
}

// Meter counts what an allocator asks of an Upstream: the one counting Upstream decorator, which
// analyze's simulation and replay's engine both put between their allocators and their memory. Build
// it with NewMeter; give the allocator the Upstream that NewMeter returns, which is a Mapper or a
// Remapper when the wrapped Upstream is one.
type Meter struct {
	up     Upstream
	m      Mapper
	r      Remapper
	opts   MeterOptions
	counts UpstreamCounts
}

// NewMeter wraps up and returns the Meter and the Upstream to hand to the allocator.
func NewMeter(up Upstream, opts MeterOptions) (*Meter, Upstream) {
	me := &Meter{up: up, opts: opts}
	m, ok := up.(Mapper)
	if !ok {
		return me, meterUpstream{me}
	}
	me.m = m
	if r, ok := up.(Remapper); ok {
		me.r = r
		return me, meterRemapper{meterMapper{meterUpstream{me}}}
	}
	return me, meterMapper{meterUpstream{me}}
}

// Counts returns the counts so far.
func (me *Meter) Counts() UpstreamCounts { return me.counts }

// gained counts a successful Reserve or Map of size bytes: the one rule by which a Meter and every
// policy's Stats (through tracked) count memory gained from an Upstream.
func (c *UpstreamCounts) gained(size uint64) {
	c.Reserves++
	c.GainedBytes += size
	c.ReservedBytes += size
	c.PeakReservedBytes = max(c.PeakReservedBytes, c.ReservedBytes)
}

// lost counts a successful Release or Unmap of size bytes.
func (c *UpstreamCounts) lost(size uint64) {
	c.Releases++
	c.ReservedBytes -= min(size, c.ReservedBytes)
}

// remapped counts a successful Remap: a reserve and a release, the bytes held unchanged.
func (c *UpstreamCounts) remapped() {
	c.Reserves++
	c.Releases++
	c.Remaps++
}

func (me *Meter) charge(c Call, size uint64) {
	if me.opts.Cost != nil {
		me.opts.Cost(c, size, 1)
	}
}

// chargePages counts and charges a Map, Unmap or Remap of size bytes, page by page.
func (me *Meter) chargePages(c Call, size uint64) {
	page := me.opts.PageBytes
	if page == 0 {
		page = max(size, 1)
	}
	n := (size + page - 1) / page
	me.counts.PageOps += n
	if me.opts.Cost != nil {
		me.opts.Cost(c, min(size, page), n)
	}
}

type meterUpstream struct{ me *Meter }

func (u meterUpstream) Reserve(size uint64) (uint64, error) {
	u.me.charge(CallReserve, size)
	addr, err := u.me.up.Reserve(size)
	if err == nil {
		u.me.counts.gained(size)
	}
	return addr, err
}

func (u meterUpstream) Release(addr, size uint64) error {
	u.me.charge(CallRelease, size)
	if err := u.me.up.Release(addr, size); err != nil {
		return err
	}
	u.me.counts.lost(size)
	return nil
}

type meterMapper struct{ meterUpstream }

func (u meterMapper) ReserveAddress(size uint64) (uint64, error) { return u.me.m.ReserveAddress(size) }

func (u meterMapper) ReleaseAddress(addr, size uint64) error {
	return u.me.m.ReleaseAddress(addr, size)
}

func (u meterMapper) Map(addr, size uint64) error {
	u.me.chargePages(CallReserve, size)
	if err := u.me.m.Map(addr, size); err != nil {
		return err
	}
	u.me.counts.gained(size)
	return nil
}

func (u meterMapper) Unmap(addr, size uint64) error {
	u.me.chargePages(CallRelease, size)
	if err := u.me.m.Unmap(addr, size); err != nil {
		return err
	}
	u.me.counts.lost(size)
	return nil
}

type meterRemapper struct{ meterMapper }

func (u meterRemapper) Remap(from, to, size uint64) error {
	u.me.chargePages(CallRemap, size)
	if err := u.me.r.Remap(from, to, size); err != nil {
		return err
	}
	u.me.counts.remapped()
	return nil
}
