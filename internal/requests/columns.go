package requests

import "github.com/allocscope/allocscope/trace"

// ColumnSource is a Source that also hands out its batches by column; *trace.Reader is one. The
// extraction reads such a source by column, without making a trace.Event of every row.
type ColumnSource interface {
	Source
	// NextColumns returns the next batch as Next would, by column.
	NextColumns() (*trace.Columns, error)
}

// Batch is one batch of a source's events: by column when the source is a ColumnSource, else the
// events themselves. It is valid until the source's next batch.
type Batch struct {
	events []trace.Event
	cols   *trace.Columns
}

// NextBatch returns the next batch of src, by column when src is a ColumnSource. Its errors are
// src's: io.EOF after the last batch.
func NextBatch(src Source) (Batch, error) {
	if cs, ok := src.(ColumnSource); ok {
		c, err := cs.NextColumns()
		return Batch{cols: c}, err
	}
	events, err := src.Next()
	return Batch{events: events}, err
}

// Len returns the number of events in b.
func (b Batch) Len() int {
	if b.cols != nil {
		return b.cols.Len()
	}
	return len(b.events)
}

// AppendBatch is Append for a batch of either form: the same ops and the same counts.
func (x *Extractor) AppendBatch(b Batch, ops []Op) []Op {
	c := b.cols
	if c == nil {
		return x.Append(b.events, ops)
	}
	ordered := streamOrderedFunctions(c.Functions)
	var e trace.Event
	for i := range c.Len() {
		ruleFields(c, i, &e)
		ops = x.appendRequest(&e, blockingCandidate(&e) && !ordered[c.Function[i]], ops)
	}
	return ops
}

// streamOrderedFunctions returns streamOrdered of each function: Synchronizes(e) is
// blockingCandidate(e) && !ordered[function index], without a string search per event.
func streamOrderedFunctions(functions []string) []bool {
	ordered := make([]bool, len(functions))
	for i, f := range functions {
		ordered[i] = streamOrdered(f)
	}
	return ordered
}

// ruleFields sets the fields of e that the rule reads (LayerOf, Of, Synchronizes and the
// Extractor) to those of row i of c; it leaves the others as they are. A field the rule comes to
// read must be added here: TestColumnsExtractSame compares the two forms on events whose every
// field varies.
func ruleFields(c *trace.Columns, i int, e *trace.Event) {
	e.Op, e.Memory, e.Layer = c.Op[i], c.Memory[i], c.Layer[i]
	e.Function = c.Functions[c.Function[i]]
	e.Size, e.Address, e.Stream = c.Size[i], c.Address[i], c.Stream[i]
	e.Result, e.DurationNs = c.Result[i], c.DurationNs[i]
	e.PID, e.Device = c.PID[i], c.Device[i]
}
