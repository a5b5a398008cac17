package stats

// CallDurations estimates how long a native allocation or free call of a given size takes, from
// the median measured duration of the trace's calls of the same function and log2 size bucket.
type CallDurations struct {
	alloc, free map[uint8]float64 // log2 bucket → median ns, of the most used function
	allocFn     string
	freeFn      string
}

func (c *Collector) callDurations() *CallDurations {
	d := &CallDurations{alloc: map[uint8]float64{}, free: map[uint8]float64{}}
	counts := map[uint16]uint64{}
	for k, s := range c.calls {
		counts[k.fn] += s.Count()
	}
	var bestAlloc, bestFree uint64
	allocFn, freeFn := -1, -1
	for fn, n := range counts {
		k := callKey{fn: fn}
		if c.isFreeFn(k.fn) {
			if n > bestFree || n == bestFree && int(k.fn) < freeFn {
				bestFree, freeFn = n, int(k.fn)
			}
		} else if n > bestAlloc || n == bestAlloc && int(k.fn) < allocFn {
			bestAlloc, allocFn = n, int(k.fn)
		}
	}
	for k, s := range c.calls {
		switch int(k.fn) {
		case allocFn:
			d.alloc[k.bucket] = s.Quantile(0.5)
		case freeFn:
			d.free[k.bucket] = s.Quantile(0.5)
		}
	}
	if allocFn >= 0 {
		d.allocFn = c.fns.name(uint16(allocFn))
	}
	if freeFn >= 0 {
		d.freeFn = c.fns.name(uint16(freeFn))
	}
	return d
}

func (c *Collector) isFreeFn(fn uint16) bool { return c.freeFns[fn] }

// Alloc returns the estimated duration of an upstream allocation of size bytes.
func (d *CallDurations) Alloc(size uint64) float64 { return nearest(d.alloc, size) }

// Free returns the estimated duration of an upstream free of size bytes.
func (d *CallDurations) Free(size uint64) float64 { return nearest(d.free, size) }

// Functions returns the native allocation and free functions the estimates come from.
func (d *CallDurations) Functions() (alloc, free string) { return d.allocFn, d.freeFn }

// nearest returns the median of size's log2 bucket, or of the nearest bucket with calls.
func nearest(m map[uint8]float64, size uint64) float64 {
	if len(m) == 0 {
		return 0
	}
	b := log2Bucket(size)
	for dist := 0; dist <= 64; dist++ {
		if v, ok := m[uint8(b+dist)]; ok && b+dist <= 64 {
			return v
		}
		if v, ok := m[uint8(b-dist)]; ok && b-dist >= 0 {
			return v
		}
	}
	return 0
}
