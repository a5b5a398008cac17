package torchsnap

import (
	"reflect"
	"testing"
)

// An OOM state's JSON is the one record writes into a trace (the field names analyze reads), and
// decodes to the same state; nil and empty are none.
func TestOOMJSONRoundTrip(t *testing.T) {
	o := &OOM{Device: 1, RequestedBytes: 1 << 20, DeviceFreeBytes: 4096,
		Segments: []Segment{{Device: 1, Address: 0x1000, TotalSize: 2 << 20, Blocks: 1,
			BlockList: []Block{{Address: 0x1000, Size: 2 << 20, State: StateAllocated, Callsite: 1}}}},
		Callsites: []string{"step (train.py:9)"}}
	raw := o.JSON()
	const want = `{"device":1,"requested_bytes":1048576,"device_free_bytes":4096,"segments":[{"device":1,` +
		`"address":4096,"total_size":2097152,"allocated_size":0,"active_size":0,"requested_size":0,"stream":0,` +
		`"large":false,"expandable":false,"blocks":1,"block_list":[{"address":4096,"size":2097152,` +
		`"requested_size":0,"state":"active_allocated","callsite":1}]}],"callsites":["step (train.py:9)"]}`
	if string(raw) != want {
		t.Errorf("JSON %s\nwant %s", raw, want)
	}
	if got, err := DecodeOOM(raw); err != nil || !reflect.DeepEqual(got, o) {
		t.Errorf("DecodeOOM = %+v, %v; want %+v", got, err, o)
	}
	if raw := (*OOM)(nil).JSON(); raw != nil {
		t.Errorf("nil state: JSON %q, want nil", raw)
	}
	if got, err := DecodeOOM(nil); got != nil || err != nil {
		t.Errorf("DecodeOOM(nil) = %+v, %v; want nil, nil", got, err)
	}
	if got, err := DecodeOOM([]byte(`{"device":1,"stacks":[]}`)); got != nil || err == nil ||
		err.Error() != `json: unknown field "stacks"` {
		t.Errorf("unknown field: %+v, %v", got, err)
	}
}

// Of asks the function RegisterReader gave (package trace's), and is nil before one is given.
func TestOf(t *testing.T) {
	saved := readerSnapshot
	defer func() { readerSnapshot = saved }()
	readerSnapshot = nil
	if got := Of("reader"); got != nil {
		t.Errorf("without a registered reader: %+v, want nil", got)
	}
	snap := &Snapshot{TraceEntries: []int{3}}
	RegisterReader(func(reader any) *Snapshot {
		if reader == "reader" {
			return snap
		}
		return nil
	})
	if got := Of("reader"); got != snap {
		t.Errorf("Of(reader) = %+v, want %+v", got, snap)
	}
	if got := Of(42); got != nil {
		t.Errorf("Of(42) = %+v, want nil", got)
	}
}

// Free is the inactive state alone.
func TestBlockFree(t *testing.T) {
	for state, want := range map[string]bool{StateInactive: true, StateAllocated: false, StatePendingFree: false} {
		if got := (Block{State: state}).Free(); got != want {
			t.Errorf("%s: free %v, want %v", state, got, want)
		}
	}
}
