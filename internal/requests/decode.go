package requests

import (
	"errors"
	"fmt"
	"io"

	"github.com/allocscope/allocscope/trace"
)

// Decoder decodes a trace's events, batch by batch, into the Log of the layer the package's rule
// chooses. The choice is known only once every event is seen, so it extracts both layers'
// requests as it goes and drops the other layer's at the end.
type Decoder struct {
	layers [2]decodedLayer // Framework, Device
}

// decodedLayer is one layer's extraction and its log.
type decodedLayer struct {
	x     *Extractor
	log   *Log
	ops   []Op
	sites []Site
}

// NewDecoder returns a decoder whose logs hold what budget allows in memory and spill the rest to
// dir ("" = os.TempDir()).
func NewDecoder(budget *Budget, dir string) *Decoder {
	d := &Decoder{}
	for i, layer := range []Layer{Framework, Device} {
		d.layers[i] = decodedLayer{x: NewExtractor(layer), log: NewLog(budget, dir, true)}
	}
	return d
}

// Add decodes a batch of events.
func (d *Decoder) Add(batch []trace.Event) error {
	for i := range d.layers {
		l := &d.layers[i]
		l.ops, l.sites = l.x.AppendSites(batch, l.ops[:0], l.sites[:0])
		if err := l.log.Append(l.ops, l.sites); err != nil {
			return err
		}
	}
	return nil
}

// Finish ends the decoding and returns the chosen layer's log and its extraction's counts. The
// decoder holds nothing after it; the caller closes the log.
func (d *Decoder) Finish() (*Log, Stats, error) {
	chosen := &d.layers[1]
	if d.layers[0].x.layerChoice.Layer() == Framework {
		chosen = &d.layers[0]
	}
	for i := range d.layers {
		if l := &d.layers[i]; l != chosen {
			_ = l.log.Close()
		}
	}
	x, log := chosen.x, chosen.log
	d.layers = [2]decodedLayer{}
	err := x.checkReplayable()
	if err == nil {
		err = log.Finish(x.Handles(), x.Slots())
	}
	if err != nil {
		_ = log.Close()
		return nil, Stats{}, err
	}
	return log, x.Stats(), nil
}

// Close drops what the decoder holds, when it is not to be finished (an error stopped the read).
func (d *Decoder) Close() {
	for i := range d.layers {
		if l := d.layers[i].log; l != nil {
			_ = l.Close()
		}
	}
	d.layers = [2]decodedLayer{}
}

// Decode reads src to its end into the log of its requests (see NewDecoder and Finish).
func Decode(src Source, budget *Budget, dir string) (*Log, Stats, error) {
	d := NewDecoder(budget, dir)
	for {
		batch, err := src.Next()
		if aerr := d.Add(batch); aerr != nil {
			d.Close()
			return nil, Stats{}, aerr
		}
		if errors.Is(err, io.EOF) {
			return d.Finish()
		}
		if err != nil {
			d.Close()
			return nil, Stats{}, fmt.Errorf("read events: %w", err)
		}
	}
}
