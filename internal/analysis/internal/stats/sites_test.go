package stats

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// Two callsites of one process and one of another: the bytes each allocated, held at the peak
// (the moment of the most live bytes, not each site's own maximum) and still held at the end; two
// sites with the same name count as one.
func TestSiteTable(t *testing.T) {
	s := newSiteTable()
	a := s.alloc(1, 0xa0, 100, 0, 0) // live 100
	b := s.alloc(1, 0xb0, 300, 0, 0) // live 400: peak
	s.snapshot()
	s.free(a, 100)
	s.free(b, 300)
	s.alloc(1, 0xa0, 50, 0, 0) // live 50
	s.alloc(2, 0xa0, 70, 0, 0) // another process's site of the same address
	s.alloc(1, 0xa1, 10, 0, 0) // named like 0xa0
	name := func(pid uint32, addr uint64) string { return fmt.Sprintf("f%x", addr&^1) }
	byBytes, atPeak := s.result(name)
	wantBytes := []schema.CallsiteTally{
		{Callsite: "fb0", PID: 1, Allocs: 1, Bytes: 300, AtPeakBytes: 300},
		{Callsite: "fa0", PID: 1, Allocs: 3, Bytes: 160, AtPeakBytes: 100, EndLiveBytes: 60},
		{Callsite: "fa0", PID: 2, Allocs: 1, Bytes: 70, EndLiveBytes: 70},
	}
	if !reflect.DeepEqual(byBytes, wantBytes) {
		t.Errorf("by bytes %+v\nwant %+v", byBytes, wantBytes)
	}
	if want := wantBytes[:2]; !reflect.DeepEqual(atPeak, want) {
		t.Errorf("at peak %+v\nwant %+v", atPeak, want)
	}
}
