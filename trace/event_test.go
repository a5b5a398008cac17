package trace

import "testing"

func TestEventRequest(t *testing.T) {
	cases := []struct {
		op   Op
		mem  Memory
		want Request
	}{
		{OpAlloc, MemoryDevice, RequestAlloc}, {OpAlloc, MemoryManaged, RequestNone},
		{OpAlloc, MemoryHost, RequestNone}, {OpFree, MemoryDevice, RequestFree},
		{OpFree, MemoryManaged, RequestNone}, {OpFree, MemoryHost, RequestNone},
		{OpCreate, MemoryVirtual, RequestAlloc}, {OpRelease, MemoryVirtual, RequestFree},
		{OpReserve, MemoryVirtual, RequestNone}, {OpUnreserve, MemoryVirtual, RequestNone},
		{OpMap, MemoryVirtual, RequestNone}, {OpUnmap, MemoryVirtual, RequestNone},
		{OpFreeRequested, MemoryDevice, RequestNone}, {OpOOM, MemoryDevice, RequestNone},
		{OpUnknown, MemoryDevice, RequestNone},
	}
	for _, c := range cases {
		e := Event{Op: c.op, Memory: c.mem}
		if got := e.Request(); got != c.want {
			t.Errorf("%v %v: Request() = %d, want %d", c.op, c.mem, got, c.want)
		}
	}
}
