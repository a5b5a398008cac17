package render

import (
	"fmt"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// PointBudget is the most timeline points the HTML report draws at once: it shows the finest level
// of the timeline that has at most this many points in the visible time range (the coarsest when
// none has).
const PointBudget = 3000

// chartData is what the page's script draws for one analyzed stream, as JSON.
type chartData struct {
	Timeline timelineData `json:"timeline"`
	Hist     barsData     `json:"hist"`
	Ratios   barsData     `json:"ratios"`
	CDF      xyData       `json:"cdf"`
	Maps     []mapData    `json:"maps"` // the memory maps at the peak, as the section lists them
	// Stacks are the full stacks of the callsites the section names, by name (TraceReport.Stacks).
	Stacks map[string][]string `json:"stacks,omitempty"`
}

// timelineData is a schema.Detail in columns. Times are nanoseconds from the stream's first event;
// T, N, Seq and every level's P are delta-coded (each value is the difference to the one before).
type timelineData struct {
	Budget  int         `json:"budget"`
	PeakT   int64       `json:"peak_t"`
	PeakV   uint64      `json:"peak_v"`
	T       []int64     `json:"t"`
	V       []uint64    `json:"v"`
	Events  bool        `json:"events"`      // the columns below are filled (else only T and V are)
	N       []int64     `json:"n,omitempty"` // DetailEvent.Request
	Seq     []int64     `json:"seq,omitempty"`
	Free    []int8      `json:"free,omitempty"`
	Size    []uint64    `json:"size,omitempty"`
	Life    []int64     `json:"life,omitempty"`   // -1: live at the end
	Stream  []int32     `json:"stream,omitempty"` // index into Streams
	Site    []int32     `json:"site,omitempty"`   // index into Sites
	Streams []string    `json:"streams,omitempty"`
	Sites   []string    `json:"sites,omitempty"`
	Levels  []levelData `json:"levels"`
	Bounds  [2]float64  `json:"bounds"` // the x range shown at first, in seconds
}

// levelData is one level of detail: BucketEvents requests per bucket, the points' indexes into
// the columns (nil for the finest level: all of them).
type levelData struct {
	BucketEvents uint64  `json:"w"`
	P            []int32 `json:"p"`
}

// barsData is a bar chart: a label and a value per bar, and a line of text per bar for tooltips.
type barsData struct {
	Labels []string  `json:"labels"`
	Values []float64 `json:"values"`
	Notes  []string  `json:"notes"`
}

// xyData is a line chart.
type xyData struct {
	X []float64 `json:"x"`
	Y []float64 `json:"y"`
}

// charts gathers the chart data of one stream.
func charts(tr *schema.TraceReport) chartData {
	s := tr.Requests
	return chartData{Timeline: timeline(s, tr.Detail), Hist: histogram(s), Ratios: ratios(tr), CDF: lifetimeCDF(s)}
}

// timeline lays out d, or the report's downsampled timeline when there is no detail.
func timeline(s *schema.Stats, d *schema.Detail) timelineData {
	td := timelineData{Budget: PointBudget, PeakT: s.PeakTimeNs - s.FirstTimeNs, PeakV: s.PeakLiveBytes}
	if d == nil || len(d.Levels) == 0 {
		d = plainDetail(s)
	} else {
		td.Events = true
	}
	streams, sites := map[string]int32{}, map[string]int32{}
	var lastT int64
	var lastSeq, lastN uint64
	for _, e := range d.Events {
		t := e.TimeNs - s.FirstTimeNs
		td.T, td.V, lastT = append(td.T, t-lastT), append(td.V, e.LiveBytes), t
		if !td.Events {
			continue
		}
		td.Seq, lastSeq = append(td.Seq, int64(e.Seq-lastSeq)), e.Seq
		td.N, lastN = append(td.N, int64(e.Request-lastN)), e.Request
		td.Free = append(td.Free, map[bool]int8{false: 0, true: 1}[e.Free])
		td.Size = append(td.Size, e.SizeBytes)
		td.Life = append(td.Life, e.LifetimeNs)
		td.Stream = append(td.Stream, intern(streams, &td.Streams,
			fmt.Sprintf("pid %d dev %d stream %#x", e.PID, e.Device, e.Stream)))
		td.Site = append(td.Site, intern(sites, &td.Sites, e.Callsite))
	}
	for i, l := range d.Levels {
		ld := levelData{BucketEvents: l.BucketEvents}
		if i > 0 {
			ld.P = make([]int32, len(l.Points))
			for j, p := range l.Points {
				ld.P[j] = p
				if j > 0 {
					ld.P[j] = p - l.Points[j-1]
				}
			}
		}
		td.Levels = append(td.Levels, ld)
	}
	td.Bounds = [2]float64{0, max(float64(lastT), 1) / 1e9}
	return td
}

// plainDetail is the report's downsampled timeline as a detail of one level without events.
func plainDetail(s *schema.Stats) *schema.Detail {
	d := &schema.Detail{Levels: []schema.DetailLevel{{BucketEvents: 1}}}
	for _, p := range s.Timeline {
		d.Events = append(d.Events, schema.DetailEvent{TimeNs: int64(p.X), LiveBytes: uint64(p.Y)})
	}
	if len(d.Events) == 0 {
		d.Events = []schema.DetailEvent{{TimeNs: s.FirstTimeNs}}
	}
	return d
}

// intern returns the index of s in *list, appending it the first time.
func intern(index map[string]int32, list *[]string, s string) int32 {
	i, ok := index[s]
	if !ok {
		i = int32(len(*list))
		index[s] = i
		*list = append(*list, s)
	}
	return i
}

// histogram is the request count of every log2 size bucket from the smallest request's to the
// largest's, the empty ones between them as 0: one bar per power of two, so that the x axis is a
// log2 axis (the report's histogram lists only the buckets that have requests).
func histogram(s *schema.Stats) barsData {
	var b barsData
	for _, h := range log2Buckets(s.Histogram) {
		b.Labels = append(b.Labels, Bytes(h.Lo))
		b.Values = append(b.Values, float64(h.Count))
		b.Notes = append(b.Notes, fmt.Sprintf("%s ≤ size < %s: %s requests, %s", Bytes(h.Lo), Bytes(h.Hi),
			Count(h.Count), Bytes(h.Bytes)))
	}
	return b
}

// log2Buckets fills the gaps of hist (non-empty log2 buckets, ascending: [0, 1), [1, 2), [2, 4),
// …) with empty buckets.
func log2Buckets(hist []schema.SizeBucket) []schema.SizeBucket {
	var out []schema.SizeBucket
	for i, h := range hist {
		if i > 0 {
			for lo := hist[i-1].Hi; lo < h.Lo && lo > 0; lo <<= 1 {
				out = append(out, schema.SizeBucket{Lo: lo, Hi: lo << 1})
			}
		}
		out = append(out, h)
	}
	return out
}

// ratios is each policy's peak reserved bytes over the peak of live bytes.
func ratios(tr *schema.TraceReport) barsData {
	var b barsData
	for _, s := range tr.Simulations {
		if s.Error != "" {
			continue
		}
		b.Labels = append(b.Labels, s.Name)
		b.Values = append(b.Values, s.ReservedRatio)
		b.Notes = append(b.Notes, fmt.Sprintf("%s: %s reserved at its peak for %s live at most (×%.3f)",
			s.Name, Bytes(s.PeakReservedBytes), Bytes(s.PeakLiveBytes), s.ReservedRatio))
	}
	return b
}

// lifetimeCDF is the lifetime CDF with lifetimes in microseconds.
func lifetimeCDF(s *schema.Stats) xyData {
	var d xyData
	for _, p := range s.LifetimeCDF {
		d.X = append(d.X, max(p.X/1e3, 1e-3))
		d.Y = append(d.Y, p.Y)
	}
	return d
}
