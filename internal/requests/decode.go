package requests

import (
	"errors"
	"fmt"
	"io"

	"github.com/allocscope/allocscope/trace"
)

// Decoder decodes a trace's events, batch by batch, into the Log of the layer the package's rule
// chooses. The choice is known only once every event is seen, so it extracts both layers'
// requests as it goes and drops the other layer's at the end. A goroutine of its own appends the
// extracted ops to the logs while the next batch is extracted, until Finish or Close.
type Decoder struct {
	layers  [2]decodedLayer // Framework, Device
	appends chan appendJob  // batches of ops extracted, in order, for the appender
	spare   chan appendJob  // buffers the appender is done with
	done    chan struct{}   // closed when the appender has returned
	err     error           // the appender's first error, read once done or through failed
	failed  chan struct{}   // closed when err is set
}

// decodedLayer is one layer's extraction and its log.
type decodedLayer struct {
	x   *Extractor
	log *Log
}

// appendJob is a batch of one layer's ops and their sites, to append to its log.
type appendJob struct {
	log   *Log
	ops   []Op
	sites []Site
}

// appendDepth is how many batches of ops may wait for the appender (per layer, twice that).
const appendDepth = 4

// NewDecoder returns a decoder whose logs hold what budget allows in memory and spill the rest to
// dir ("" = os.TempDir()).
func NewDecoder(budget *Budget, dir string) *Decoder {
	d := &Decoder{appends: make(chan appendJob, 2*appendDepth), spare: make(chan appendJob, 2*appendDepth+2),
		done: make(chan struct{}), failed: make(chan struct{})}
	for i, layer := range []Layer{Framework, Device} {
		d.layers[i] = decodedLayer{x: NewExtractor(layer), log: NewLog(budget, dir, true)}
	}
	for range cap(d.spare) {
		d.spare <- appendJob{}
	}
	go d.appendAll(d.appends)
	return d
}

// appendAll appends every batch sent to appends (d.appends) to its log, until the channel is
// closed; after the first error it only hands the buffers back.
func (d *Decoder) appendAll(appends <-chan appendJob) {
	defer close(d.done)
	for job := range appends {
		if d.err == nil {
			if err := job.log.Append(job.ops, job.sites); err != nil {
				d.err = err
				close(d.failed)
			}
		}
		d.spare <- appendJob{ops: job.ops[:0], sites: job.sites[:0]}
	}
}

// Add decodes a batch of events. It returns the error of an earlier batch's append (a spill
// that failed): the appender runs a few batches behind.
func (d *Decoder) Add(batch []trace.Event) error {
	if d.appends == nil {
		return errors.New("add to a finished or closed request decoder")
	}
	for i := range d.layers {
		select {
		case <-d.failed:
			return d.err
		default:
		}
		l := &d.layers[i]
		job := <-d.spare
		job.log = l.log
		job.ops, job.sites = l.x.AppendSites(batch, job.ops, job.sites)
		d.appends <- job
	}
	return nil
}

// wait stops the appender once it has appended every batch and returns its error.
func (d *Decoder) wait() error {
	if d.appends != nil {
		close(d.appends)
		d.appends = nil
		<-d.done
	}
	return d.err
}

// Finish ends the decoding and returns the chosen layer's log and its extraction's counts. The
// decoder holds nothing after it; the caller closes the log.
func (d *Decoder) Finish() (*Log, Stats, error) {
	if err := d.wait(); err != nil {
		d.Close()
		return nil, Stats{}, err
	}
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
	_ = d.wait()
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
