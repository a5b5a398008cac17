package host

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/pool"
)

func TestHostMapperMapUnmapRelease(t *testing.T) {
	h := New(8 * page)
	defer h.Close()
	a, err := h.ReserveAddress(10*page + 1) // 11 pages of address space, no memory
	if err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 8*page {
		t.Errorf("free after ReserveAddress = %d, want %d", free, 8*page)
	}
	if err := h.Touch(a, page, 1); err == nil || !strings.Contains(err.Error(), "not inside a mapping") {
		t.Errorf("Touch of unmapped address space: err = %v", err)
	}
	// Two Map calls side by side: a block may span them.
	if err := errors.Join(h.Map(a+page, 3*page), h.Map(a+4*page, 2*page)); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 3*page || h.pages.Len() != 1 {
		t.Errorf("free %d, mapped ranges %d; want %d, 1", free, h.pages.Len(), 3*page)
	}
	if err := h.Touch(a+page+10, 5*page-20, 0x77); err != nil {
		t.Errorf("Touch across two Map calls: %v", err)
	}
	if err := h.Touch(a+5*page, 2*page, 1); err == nil {
		t.Errorf("Touch past the mapped pages succeeded")
	}
	// Unmap a page in the middle of the first Map call: the pages around it keep their bytes.
	if err := h.Unmap(a+2*page, page); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(h.Check(a+page+10, page-10, 0x77), h.Check(a+3*page, 3*page-10, 0x77)); err != nil {
		t.Errorf("pages beside the unmapped one: %v", err)
	}
	if err := h.Touch(a+2*page, 1, 1); err == nil {
		t.Errorf("Touch of an unmapped page succeeded")
	}
	// Mapped again, the page holds zeros: its old contents were dropped.
	if err := h.Map(a+2*page, page); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(a+2*page, page, 0); err != nil {
		t.Errorf("page mapped again: %v", err)
	}
	if err := h.Unmap(a+page, 5*page); err != nil {
		t.Fatalf("Unmap of pages mapped by three calls: %v", err)
	}
	if free, _, _ := h.MemGetInfo(); free != 8*page || h.pages.Len() != 0 {
		t.Errorf("after unmapping: free %d, mapped ranges %d; want %d, 0", free, h.pages.Len(), 8*page)
	}
	if err := h.ReleaseAddress(a, 10*page+1); err != nil {
		t.Fatal(err)
	}
	if h.vas.Len() != 0 {
		t.Errorf("%d address reservations left", h.vas.Len())
	}
}

func TestHostMapperErrors(t *testing.T) {
	h := New(4 * page)
	defer h.Close()
	a, err := h.ReserveAddress(8 * page)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Map(a, 2*page); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"map overlapping", h.Map(a+page, 2*page), "overlaps mapped", nil},
		{"map unaligned address", h.Map(a+2*page+1, page), "not a non-empty multiple of the", nil},
		{"map unaligned size", h.Map(a+2*page, page+1), "not a non-empty multiple of the", nil},
		{"map nothing", h.Map(a+2*page, 0), "not a non-empty multiple of the", nil},
		{"map past the reservation", h.Map(a+7*page, 2*page), "not inside reserved address space", pool.ErrUnknownAddress},
		{"map beyond the capacity", h.Map(a+2*page, 3*page), fmt.Sprintf("with %d of %d mapped", 2*page, 4*page), pool.ErrOutOfMemory},
		{"unmap unmapped", h.Unmap(a+page, 2*page), "not mapped", pool.ErrUnknownAddress},
		{"unmap outside", h.Unmap(a+8*page, page), "not inside reserved address space", pool.ErrUnknownAddress},
		{"release mapped", h.ReleaseAddress(a, 8*page), "is still mapped", nil},
		{"release wrong size", h.ReleaseAddress(a, 4*page), "reserved with", nil},
		{"release unknown", h.ReleaseAddress(a+page, 7*page), "no such reservation", pool.ErrUnknownAddress},
		{"reserve nothing", errOf(h.ReserveAddress(0)), "size out of range", nil},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || (c.is != nil && !errors.Is(c.err, c.is)) {
			t.Errorf("%s: err = %v, want one containing %q (matching %v)", c.name, c.err, c.want, c.is)
		}
	}
	if free, _, _ := h.MemGetInfo(); free != 2*page || h.pages.Len() != 1 {
		t.Errorf("after the refused calls: free %d, mapped ranges %d; want %d, 1", free, h.pages.Len(), 2*page)
	}
	// Close unmaps the reservation with its mapped pages.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 4*page || h.vas.Len() != 0 || h.pages.Len() != 0 {
		t.Errorf("after Close: free %d, reservations %d, mapped ranges %d; want %d, 0, 0", free, h.vas.Len(), h.pages.Len(), 4*page)
	}
}

// TestHostMapperAdjacentReservationsStayApart maps the last page of one reservation and the first
// of the next: even when the kernel put the two reservations side by side, no block may span them.
func TestHostMapperAdjacentReservationsStayApart(t *testing.T) {
	h := New(4 * page)
	defer h.Close()
	a, _ := h.ReserveAddress(2 * page)
	b, _ := h.ReserveAddress(2 * page)
	lo, hi := min(a, b), max(a, b)
	if err := errors.Join(h.Map(lo+page, page), h.Map(hi, page)); err != nil {
		t.Fatal(err)
	}
	if h.pages.Len() != 2 {
		t.Errorf("mapped ranges = %d, want 2", h.pages.Len())
	}
	if err := h.Touch(lo+page, 2*page, 1); err == nil {
		t.Errorf("Touch across two reservations succeeded (reservations at %#x and %#x)", a, b)
	}
}

func errOf(_ uint64, err error) error { return err }
