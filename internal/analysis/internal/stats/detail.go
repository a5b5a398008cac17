package stats

import (
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/trace"
)

const (
	// maxDetailBuckets bounds the finest level of a detail timeline: at most 2^16 points.
	maxDetailBuckets = 1 << 15
	// coarsestDetailBuckets is the most buckets the coarsest level may have.
	coarsestDetailBuckets = 256
)

// blockRef identifies one allocation: its block and the allocation's seq (a block is allocated
// again at the same address; merged traces may repeat seqs, not both).
type blockRef struct {
	k   Key
	seq uint64
}

// detailPoint is one allocation or free with the live bytes after it.
type detailPoint struct {
	n        uint64 // arrival order among the requests
	seq      uint64
	time     int64
	live     uint64
	size     uint64
	stream   uint64
	callsite uint64 // the allocation's
	addr     uint64
	lifetime int64 // -1 while unknown
	pid      uint32
	device   int32
	free     bool
	idx      int32 // index in the finest level's events, set by finish
}

func (p *detailPoint) ref() blockRef { return blockRef{Key{p.pid, p.device, p.addr}, p.seq} }

// detailBucket holds the points of a bucket at which live bytes were lowest and highest.
type detailBucket struct{ min, max detailPoint }

// detailTimeline is Timeline with the event behind every point, for the HTML report: it keeps up
// to maxDetailBuckets buckets of equal count in bounded memory, doubling their width as Timeline
// does, and learns the lifetime of the allocations it keeps when they are freed.
type detailTimeline struct {
	keep    func(k Key, seq uint64) // marks a live block whose allocation a closed bucket keeps
	limit   int                     // the most buckets (0: maxDetailBuckets)
	buckets []detailBucket
	width   uint64
	fill    uint64
	n       uint64
	// lifetimes holds the allocations kept by closed buckets: -1 while live, else their lifetime.
	// When it reaches 4 × limit entries, those of allocations no bucket keeps any more go.
	lifetimes map[blockRef]int64
}

// alloc records an allocation after which live bytes are live.
func (d *detailTimeline) alloc(e *trace.Event, live uint64) {
	d.add(detailPoint{seq: e.Seq, time: e.TimeNs, live: live, size: e.Size, stream: e.Stream,
		callsite: e.Callsite, addr: e.Address, lifetime: -1, pid: e.PID, device: e.Device})
}

// free records the free of block b after which live bytes are live.
func (d *detailTimeline) free(e *trace.Event, b *liveBlock, live uint64) {
	lifetime := e.TimeNs - b.time
	d.resolve(blockRef{KeyOf(e), b.seq}, lifetime, b.kept)
	d.add(detailPoint{seq: e.Seq, time: e.TimeNs, live: live, size: b.size, stream: e.Stream,
		callsite: b.callsite, addr: e.Address, lifetime: lifetime, pid: e.PID, device: e.Device, free: true})
}

func (d *detailTimeline) add(p detailPoint) {
	d.n++
	p.n = d.n
	if d.fill == d.width {
		d.start(p)
		return
	}
	d.fill++
	b := &d.buckets[len(d.buckets)-1]
	if p.live < b.min.live {
		b.min = p
	} else if p.live > b.max.live {
		b.max = p
	}
}

// start closes the last bucket and opens one holding p, merging neighbours when the buckets are full.
func (d *detailTimeline) start(p detailPoint) {
	if d.width == 0 {
		if d.limit == 0 {
			d.limit = maxDetailBuckets
		}
		d.width = 1
		d.buckets = make([]detailBucket, 0, d.limit)
		d.lifetimes = make(map[blockRef]int64)
	} else {
		d.close(&d.buckets[len(d.buckets)-1])
	}
	if len(d.buckets) == d.limit {
		d.buckets = mergeBuckets(d.buckets, d.buckets[:0])
		d.width *= 2
	}
	d.buckets = append(d.buckets, detailBucket{min: p, max: p})
	d.fill = 1
}

// close notes the allocations of a bucket that is full, so that their frees give their lifetime.
func (d *detailTimeline) close(b *detailBucket) {
	for _, p := range [2]*detailPoint{&b.min, &b.max} {
		if !p.free && p.lifetime < 0 {
			d.lifetimes[p.ref()] = -1
			if d.keep != nil {
				d.keep(p.ref().k, p.seq)
			}
		}
	}
	if len(d.lifetimes) >= 4*d.limit {
		d.prune()
	}
}

// resolve takes the lifetime of a freed allocation, when a bucket keeps it: the open bucket, or a
// closed one when kept (the block was marked, or d has no keep to mark blocks with).
func (d *detailTimeline) resolve(r blockRef, lifetime int64, kept bool) {
	if n := len(d.buckets); n > 0 {
		b := &d.buckets[n-1]
		for _, p := range [2]*detailPoint{&b.min, &b.max} {
			if !p.free && p.ref() == r {
				p.lifetime = lifetime
			}
		}
	}
	if !kept && d.keep != nil {
		return
	}
	if v, ok := d.lifetimes[r]; ok && v < 0 {
		d.lifetimes[r] = lifetime
	}
}

// prune drops the lifetimes of allocations that no bucket keeps any more.
func (d *detailTimeline) prune() {
	kept := make(map[blockRef]int64, 2*len(d.buckets))
	for i := range d.buckets {
		for _, p := range [2]*detailPoint{&d.buckets[i].min, &d.buckets[i].max} {
			if v, ok := d.lifetimes[p.ref()]; ok && !p.free {
				kept[p.ref()] = v
			}
		}
	}
	d.lifetimes = kept
}

// mergeBuckets merges pairs of neighbours of in into out (which may be in[:0]); an odd last
// bucket stays alone.
func mergeBuckets(in, out []detailBucket) []detailBucket {
	for i := 0; i < len(in); i += 2 {
		a := in[i]
		if i+1 < len(in) {
			b := in[i+1]
			if b.min.live < a.min.live {
				a.min = b.min
			}
			if b.max.live > a.max.live {
				a.max = b.max
			}
		}
		out = append(out, a)
	}
	return out
}

// points appends the points of bucket b to out, in arrival order.
func (b *detailBucket) points(out []*detailPoint) []*detailPoint {
	first, second := &b.min, &b.max
	if second.n < first.n {
		first, second = second, first
	}
	out = append(out, first)
	if second.n != first.n {
		out = append(out, second)
	}
	return out
}

// finish returns the timeline's levels, naming callsites with name; nil when it saw no request.
func (d *detailTimeline) finish(name func(pid uint32, id uint64) string) *schema.Detail {
	if len(d.buckets) == 0 {
		return nil
	}
	out := &schema.Detail{Events: make([]schema.DetailEvent, 0, 2*len(d.buckets))}
	names := map[[2]uint64]string{}
	var pts []*detailPoint
	for i := range d.buckets {
		b := &d.buckets[i]
		for _, p := range b.points(pts[:0]) {
			p.idx = int32(len(out.Events))
			out.Events = append(out.Events, d.event(p, names, name))
		}
		if b.max.n == b.min.n { // one point: points set only min's index
			b.max.idx = b.min.idx
		}
	}
	width := d.width
	for level := d.buckets; ; {
		dl := schema.DetailLevel{BucketEvents: width, Points: make([]int32, 0, 2*len(level))}
		for i := range level {
			for _, p := range level[i].points(pts[:0]) {
				dl.Points = append(dl.Points, p.idx)
			}
		}
		out.Levels = append(out.Levels, dl)
		if len(level) <= coarsestDetailBuckets {
			return out
		}
		level, width = mergeBuckets(level, make([]detailBucket, 0, (len(level)+1)/2)), 2*width
	}
}

// event is p as the report holds it, its lifetime resolved where it was freed after its bucket closed.
func (d *detailTimeline) event(p *detailPoint, names map[[2]uint64]string,
	name func(pid uint32, id uint64) string) schema.DetailEvent {
	lifetime := p.lifetime
	if v, ok := d.lifetimes[p.ref()]; ok && !p.free && lifetime < 0 {
		lifetime = v
	}
	site := ""
	if p.callsite != 0 {
		k := [2]uint64{uint64(p.pid), p.callsite}
		s, ok := names[k]
		if !ok {
			s = name(p.pid, p.callsite)
			names[k] = s
		}
		site = s
	}
	return schema.DetailEvent{Request: p.n, Seq: p.seq, TimeNs: p.time, LiveBytes: p.live, Free: p.free, SizeBytes: p.size,
		PID: p.pid, Device: p.device, Stream: p.stream, Callsite: site, LifetimeNs: lifetime}
}
