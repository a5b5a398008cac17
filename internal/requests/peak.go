package requests

import "github.com/allocscope/allocscope/trace"

// PeakLive computes a trace's peak live bytes as the request stream counts them: the most
// requested bytes live at once among the requests of the layer the package's rule chooses
// (Stats.PeakLiveBytes of Extract). analyze reports it as peak live, replay checks pools against
// it, and record's summary prints it, so that all three give one figure for one trace: allocations
// of 0 bytes hold nothing and free nothing, double frees, frees of addresses never allocated and
// failed calls change nothing, and an allocation at a live address frees the block there first.
// It keeps one live-block table per layer and no ops. The zero value is not usable: NewPeakLive.
type PeakLive struct {
	layers [2]*Extractor // Framework, Device
	choice LayerChoice   // of every event
	ops    []Op          // scratch: what an event asked, dropped at once
}

// NewPeakLive returns a PeakLive that has seen no event.
func NewPeakLive() *PeakLive {
	return &PeakLive{layers: [2]*Extractor{NewExtractor(Framework), NewExtractor(Device)}}
}

// Add counts e; give it every event of the trace, in seq order. Only an allocation or a free
// (trace.Event.Request) goes to its layer's extractor: an event of the other layer, and one that
// asks neither, changes no layer's live blocks.
func (p *PeakLive) Add(e *trace.Event) {
	p.choice.Add(e)
	if e.Request() == trace.RequestNone {
		return
	}
	x := p.layers[1]
	if LayerOf(e) == Framework {
		x = p.layers[0]
	}
	p.ops = x.add(e, p.ops[:0])
}

// Bytes returns the peak live bytes of the chosen layer's requests among the events added so far.
func (p *PeakLive) Bytes() uint64 {
	if p.choice.Layer() == Framework {
		return p.layers[0].stats.PeakLiveBytes
	}
	return p.layers[1].stats.PeakLiveBytes
}
