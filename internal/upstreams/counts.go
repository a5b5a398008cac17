package upstreams

// Counts is what an allocator asked of its upstream, counted as pool.Stats counts it: a Map counts
// as a reserve and an Unmap as a release of their bytes, a Remap as both with the bytes held
// unchanged; address space holds no memory.
type Counts struct {
	Reserves          uint64 // successful Reserve and Map calls (and Remaps)
	Releases          uint64 // successful Release and Unmap calls (and Remaps)
	Remaps            uint64 // successful Remap calls
	ReservedBytes     uint64 // bytes held now
	PeakReservedBytes uint64 // the most bytes held at once
	GainedBytes       uint64 // bytes of all successful Reserve and Map calls
	PageOps           uint64 // pages mapped, unmapped or moved, of poolmeter.Options.PageBytes each
}

// Gained counts a successful Reserve or Map of size bytes: the one rule by which a Meter and every
// policy's Stats count memory gained from an Upstream.
func (c *Counts) Gained(size uint64) {
	c.Reserves++
	c.GainedBytes += size
	c.ReservedBytes += size
	c.PeakReservedBytes = max(c.PeakReservedBytes, c.ReservedBytes)
}

// Lost counts a successful Release or Unmap of size bytes.
func (c *Counts) Lost(size uint64) {
	c.Releases++
	c.ReservedBytes -= min(size, c.ReservedBytes)
}

// Remapped counts a successful Remap: a reserve and a release, the bytes held unchanged.
func (c *Counts) Remapped() {
	c.Reserves++
	c.Releases++
	c.Remaps++
}
