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
	allocFn, freeFn := -1, -1
	var bestAlloc, bestFree uint64
	for fn, buckets := range c.calls {
		var n uint64
		for _, s := range buckets {
			if s != nil {
				n += s.Count()
			}
		}
		if c.freeFns[fn] && n > bestFree {
			bestFree, freeFn = n, fn
		} else if !c.freeFns[fn] && n > bestAlloc {
			bestAlloc, allocFn = n, fn
		}
	}
	fill := func(fn int, into map[uint8]float64) string {
		if fn < 0 {
			return ""
		}
		for b, s := range c.calls[fn] {
			if s != nil {
				into[uint8(b)] = s.Quantile(0.5)
			}
		}
		return c.fns.name(uint16(fn))
	}
	d.allocFn, d.freeFn = fill(allocFn, d.alloc), fill(freeFn, d.free)
	return d
}

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
