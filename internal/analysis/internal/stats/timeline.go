package stats

// maxTimelineBuckets bounds a Timeline: each bucket yields at most two points (its minimum and
// maximum), so a timeline has at most 2000 points.
const maxTimelineBuckets = 1000

type timelinePoint struct {
	time  int64
	value uint64
}

type timelineBucket struct {
	min, max timelinePoint
	set      bool
}

// Timeline downsamples a series of (time, value) updates to at most 2000 points in bounded
// memory. The updates are split into buckets of equal count; each bucket keeps its lowest and
// highest point, so the series' maximum is always kept. When the buckets are full, neighbours
// are merged and the bucket width doubles.
type Timeline struct {
	buckets []timelineBucket
	width   uint64
	n       uint64
	fill    uint64 // updates in the last bucket
}

// Add records the value at time.
func (t *Timeline) Add(time int64, value uint64) {
	t.n++
	p := timelinePoint{time, value}
	if t.fill == t.width { // the last bucket is full (or there is none): start one
		t.start(p)
		return
	}
	t.fill++
	b := &t.buckets[len(t.buckets)-1]
	if value < b.min.value {
		b.min = p
	} else if value > b.max.value {
		b.max = p
	}
}

// start opens a new bucket holding p, merging neighbours first when the buckets are full. It is
// called only when every bucket is full, and merging full buckets leaves them full.
func (t *Timeline) start(p timelinePoint) {
	if t.width == 0 {
		t.width = 1
		t.buckets = make([]timelineBucket, 0, maxTimelineBuckets)
	}
	if len(t.buckets) == maxTimelineBuckets {
		t.merge()
	}
	t.buckets = append(t.buckets, timelineBucket{min: p, max: p, set: true})
	t.fill = 1
}

func (t *Timeline) merge() {
	half := len(t.buckets) / 2
	for i := range half {
		a, b := t.buckets[2*i], t.buckets[2*i+1]
		if b.min.value < a.min.value {
			a.min = b.min
		}
		if b.max.value > a.max.value {
			a.max = b.max
		}
		t.buckets[i] = a
	}
	t.buckets = t.buckets[:half]
	t.width *= 2
}

// Points returns the kept points in time order.
func (t *Timeline) Points() [][2]float64 {
	out := make([][2]float64, 0, 2*len(t.buckets))
	for _, b := range t.buckets {
		first, second := b.min, b.max
		if second.time < first.time {
			first, second = second, first
		}
		out = append(out, [2]float64{float64(first.time), float64(first.value)})
		if second != first {
			out = append(out, [2]float64{float64(second.time), float64(second.value)})
		}
	}
	return out
}
