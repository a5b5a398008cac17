package sim

import (
	"github.com/allocscope/allocscope/analysis/internal/stats"
	"github.com/allocscope/allocscope/trace"
)

// request is an event as the workers see it, classified once per batch for all of them: what it
// asks of an allocator and whether the program synchronized with the device there. It holds no
// pointers, so handing batches to the workers copies no strings.
type request struct {
	key    stats.Key // the block: (pid, device, address)
	size   uint64
	stream uint64
	kind   int8 // +1 an allocation to serve, -1 a free, 0 none (a synchronization point only)
	sync   bool // a native call that synchronizes with the device (see syncCalls)
}

// classifier turns batches of events into requests.
type classifier struct {
	stream Stream
	syncs  syncCalls
}

// convert appends to out the requests of batch: every event that asks something of an allocator
// or synchronizes with the device, in order.
func (c *classifier) convert(batch []trace.Event, out []request) []request {
	for i := range batch {
		e := &batch[i]
		kind := int8(c.stream.request(e))
		sync := c.syncs.synchronizes(e)
		if kind == 0 && !sync {
			continue
		}
		out = append(out, request{key: stats.KeyOf(e), size: e.Size, stream: e.Stream, kind: kind, sync: sync})
	}
	return out
}
