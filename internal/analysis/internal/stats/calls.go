package stats

// CallDurations estimates how long a native allocation or free call of a given size takes, from
// the median measured duration of the trace's calls of the same function and log2 size bucket (or
// of the nearest bucket with calls, the larger on a tie). The estimates are resolved per bucket when
// made: a simulation asks for one per upstream call.
type CallDurations struct {
	alloc, free [buckets]float64 // log2 bucket → estimated ns, of the most used function
	allocFn     string
	freeFn      string
}

// buckets is the number of log2 size buckets (log2Bucket's range).
const buckets = 65

func (c *Collector) callDurations() *CallDurations {
	d := &CallDurations{}
	allocFn, freeFn := -1, -1
	var bestAlloc, bestFree uint64
	for fn, sketches := range c.calls {
		var n uint64
		for _, s := range sketches {
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
	fill := func(fn int, into *[buckets]float64) string {
		if fn < 0 {
			return ""
		}
		resolveNearest(&c.calls[fn], into)
		return c.fns.name(uint16(fn))
	}
	d.allocFn, d.freeFn = fill(allocFn, &d.alloc), fill(freeFn, &d.free)
	return d
}

// resolveNearest sets into[b], for every bucket b, to the median of the sketch of b or else of the
// nearest bucket with one, the larger bucket on a tie (0 when there is none).
func resolveNearest(sketches *[buckets]*Sketch, into *[buckets]float64) {
	var median [buckets]float64
	var seen [buckets]bool
	for b, s := range sketches {
		if s != nil {
			median[b], seen[b] = s.Quantile(0.5), true
		}
	}
	for b := range into {
		for dist := 0; dist < buckets; dist++ {
			if up := b + dist; up < buckets && seen[up] {
				into[b] = median[up]
				break
			}
			if down := b - dist; down >= 0 && seen[down] {
				into[b] = median[down]
				break
			}
		}
	}
}

// Alloc returns the estimated duration of an upstream allocation of size bytes.
func (d *CallDurations) Alloc(size uint64) float64 { return d.alloc[log2Bucket(size)] }

// Free returns the estimated duration of an upstream free of size bytes.
func (d *CallDurations) Free(size uint64) float64 { return d.free[log2Bucket(size)] }

// Functions returns the native allocation and free functions the estimates come from.
func (d *CallDurations) Functions() (alloc, free string) { return d.allocFn, d.freeFn }
