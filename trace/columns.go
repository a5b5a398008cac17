package trace

// Columns is one batch of a trace's events, column by column: row i of every slice is one event,
// the Event that Event(i) returns. For an Arrow trace the numeric columns are the record batch's
// own buffers, decoded once and not copied, so a consumer that needs a few fields of each event
// reads only those.
//
// The slices are valid until the next call of Reader.NextColumns or Reader.Next, or Reader.Close,
// and must not be modified; Functions and its strings stay valid.
type Columns struct {
	Seq        []uint64
	TimeNs     []int64
	DurationNs []int64
	PID        []uint32
	TID        []uint32
	Device     []int32
	Op         []Op
	Memory     []Memory
	Layer      []Layer
	Function   []int32 // index into Functions
	Size       []uint64
	Address    []uint64
	Handle     []uint64
	Stream     []uint64
	Result     []int32
	Callsite   []uint64
	// Pool is 1 where allocscope's pool served the call; nil when an Arrow trace has no pool
	// column (every event was served by CUDA).
	Pool []uint8
	// Functions holds the function names that Function indexes. Later batches may add names; they
	// do not change the ones a batch saw.
	Functions []string
	rows      int
}

// Len returns the number of events in the batch.
func (c *Columns) Len() int { return c.rows }

// Event returns the event of row i.
func (c *Columns) Event(i int) Event {
	return Event{
		Seq:        c.Seq[i],
		TimeNs:     c.TimeNs[i],
		DurationNs: c.DurationNs[i],
		PID:        c.PID[i],
		TID:        c.TID[i],
		Device:     c.Device[i],
		Op:         c.Op[i],
		Memory:     c.Memory[i],
		Layer:      c.Layer[i],
		Function:   c.Functions[c.Function[i]],
		Size:       c.Size[i],
		Address:    c.Address[i],
		Handle:     c.Handle[i],
		Stream:     c.Stream[i],
		Result:     c.Result[i],
		Callsite:   c.Callsite[i],
		Pool:       c.Pool != nil && c.Pool[i] != 0,
	}
}

// fillEvents fills buf (reusing its storage) with the events of c.
func fillEvents(c *Columns, buf []Event) []Event {
	if cap(buf) < c.rows {
		buf = make([]Event, c.rows)
	}
	buf = buf[:c.rows]
	for i := range buf {
		buf[i] = c.Event(i)
	}
	return buf
}

// transposer turns batches of events into Columns for the formats that are not stored by column,
// reusing its storage.
type transposer struct {
	cols  Columns
	index map[string]int32 // function name → index into cols.Functions
}

// columns returns the columns of events, valid until the next call.
func (t *transposer) columns(events []Event) *Columns {
	c := &t.cols
	n := len(events)
	c.rows = n
	c.Seq, c.TimeNs, c.DurationNs = resize(c.Seq, n), resize(c.TimeNs, n), resize(c.DurationNs, n)
	c.PID, c.TID, c.Device = resize(c.PID, n), resize(c.TID, n), resize(c.Device, n)
	c.Op, c.Memory, c.Layer = resize(c.Op, n), resize(c.Memory, n), resize(c.Layer, n)
	c.Function, c.Size, c.Address = resize(c.Function, n), resize(c.Size, n), resize(c.Address, n)
	c.Handle, c.Stream, c.Result = resize(c.Handle, n), resize(c.Stream, n), resize(c.Result, n)
	c.Callsite, c.Pool = resize(c.Callsite, n), resize(c.Pool, n)
	for i := range events {
		e := &events[i]
		c.Seq[i], c.TimeNs[i], c.DurationNs[i] = e.Seq, e.TimeNs, e.DurationNs
		c.PID[i], c.TID[i], c.Device[i] = e.PID, e.TID, e.Device
		c.Op[i], c.Memory[i], c.Layer[i] = e.Op, e.Memory, e.Layer
		c.Function[i] = t.function(e.Function)
		c.Size[i], c.Address[i], c.Handle[i], c.Stream[i] = e.Size, e.Address, e.Handle, e.Stream
		c.Result[i], c.Callsite[i], c.Pool[i] = e.Result, e.Callsite, 0
		if e.Pool {
			c.Pool[i] = 1
		}
	}
	return c
}

// function returns the index of name in t.cols.Functions, adding it when it is new.
func (t *transposer) function(name string) int32 {
	if i, ok := t.index[name]; ok {
		return i
	}
	if t.index == nil {
		t.index = map[string]int32{}
	}
	i := int32(len(t.cols.Functions))
	t.cols.Functions = append(t.cols.Functions, name)
	t.index[name] = i
	return i
}

// resize returns s with length n, reusing its storage when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
