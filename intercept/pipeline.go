package intercept

import (
	"sync/atomic"

	"github.com/allocscope/allocscope/trace"
)

// pipelineBatch is the number of events handed from the merge to the writer at a time.
const pipelineBatch = 8192

// pipelinedSink passes events to sink on a second goroutine, in batches, so that merging the raw
// logs and encoding the Arrow trace run at the same time. Write copies the event.
type pipelinedSink struct {
	cur    []trace.Event
	full   chan []trace.Event
	empty  chan []trace.Event
	done   chan error
	failed atomic.Bool
}

// newPipelinedSink starts the goroutine that writes to sink; finish must be called once.
func newPipelinedSink(sink eventSink) *pipelinedSink {
	p := &pipelinedSink{
		cur:   make([]trace.Event, 0, pipelineBatch),
		full:  make(chan []trace.Event, 1),
		empty: make(chan []trace.Event, 2),
		done:  make(chan error, 1),
	}
	p.empty <- make([]trace.Event, 0, pipelineBatch)
	go p.drain(sink)
	return p
}

// drain writes every batch to sink; after the first error it only recycles batches.
func (p *pipelinedSink) drain(sink eventSink) {
	var err error
	for batch := range p.full {
		for i := 0; i < len(batch) && err == nil; i++ {
			err = sink.Write(&batch[i])
		}
		if err != nil {
			p.failed.Store(true)
		}
		p.empty <- batch[:0]
	}
	p.done <- err
}

// Write queues a copy of e.
func (p *pipelinedSink) Write(e *trace.Event) error {
	p.cur = append(p.cur, *e)
	if len(p.cur) < pipelineBatch {
		return nil
	}
	if p.failed.Load() {
		return errPipelineFailed
	}
	p.full <- p.cur
	p.cur = <-p.empty
	return nil
}

// finish writes what is queued, stops the goroutine and returns the first write error.
func (p *pipelinedSink) finish() error {
	if len(p.cur) > 0 {
		p.full <- p.cur
	}
	close(p.full)
	return <-p.done
}

// errPipelineFailed stops the merge early; finish returns the writer's own error.
var errPipelineFailed = pipelineError("trace writer failed")

type pipelineError string

func (e pipelineError) Error() string { return string(e) }
