package host

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/replay/backend"
	"github.com/allocscope/allocscope/pool"
)

// page is the host page size, the unit of the backend's mappings.
var page = uint64(unix.Getpagesize())

func TestHostBackendReserveReleaseAndMemInfo(t *testing.T) {
	h := New(10 * page)
	defer h.Close()
	a, err := h.Reserve(1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Reserve(3*page + 1)
	if err != nil {
		t.Fatal(err)
	}
	if free, total, _ := h.MemGetInfo(); free != 5*page || total != 10*page {
		t.Errorf("MemGetInfo = %d, %d; want %d, %d", free, total, 5*page, 10*page)
	}
	if _, err := h.Reserve(5*page + 1); !errors.Is(err, pool.ErrOutOfMemory) {
		t.Errorf("Reserve beyond capacity: err = %v, want ErrOutOfMemory", err)
	}
	if err := h.Release(b, 2*page); err == nil || !strings.Contains(err.Error(), "reserved with") {
		t.Errorf("Release with the wrong size: err = %v", err)
	}
	if err := h.Release(b+page, 3*page+1); !errors.Is(err, pool.ErrUnknownAddress) {
		t.Errorf("Release inside a region: err = %v, want ErrUnknownAddress", err)
	}
	if err := errors.Join(h.Release(a, 1), h.Release(b, 3*page+1)); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 10*page || h.maps.Len() != 0 {
		t.Errorf("after releases: free %d, mappings %d; want %d, 0", free, h.maps.Len(), 10*page)
	}
}

func TestHostBackendTouchAndCheck(t *testing.T) {
	h := New(0)
	defer h.Close()
	base, err := h.Reserve(4 * page)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Touch(base+100, 2*page, 0xab); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(base+100, 2*page, 0xab); err != nil {
		t.Errorf("Check after Touch: %v", err)
	}
	m, _ := h.maps.Get(base)
	m.Data[100+page] = 0 // the middle of the block
	err = h.Check(base+100, 2*page, 0xab)
	want := "byte 4096 of block"
	if page != 4096 || err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Check of a corrupted block: err = %v, want prefix %q", err, want)
	}
	if m.Data[99] != 0 || m.Data[100+2*page] != 0 {
		t.Errorf("Touch wrote outside its block")
	}
	if err := h.Touch(base+3*page, 2*page, 1); err == nil || !strings.Contains(err.Error(), "not inside a mapping") {
		t.Errorf("Touch across the end of a mapping: err = %v", err)
	}
}

func TestHostBackendAsyncRetainsPerStream(t *testing.T) {
	h := New(100 * page)
	defer h.Close()
	s1, _ := h.CreateStream()
	s2, _ := h.CreateStream()
	a, _ := h.AllocAsync(100, s1)
	if err := h.FreeAsync(a, s1); err != nil {
		t.Fatal(err)
	}
	b, _ := h.AllocAsync(200, s2) // other stream: new mapping
	c, _ := h.AllocAsync(300, s1) // same stream, same page-rounded size: a again
	if b == a || c != a {
		t.Errorf("a %#x, b %#x, c %#x: want b != a, c == a", a, b, c)
	}
	if cur, high, _ := h.AsyncPoolReserved(); cur != 2*page || high != 2*page {
		t.Errorf("reserved %d, high %d; want %d, %d", cur, high, 2*page, 2*page)
	}
	if err := errors.Join(h.FreeAsync(b, s2), h.FreeAsync(c, s1), h.DestroyStream(s1), h.DestroyStream(s2)); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := h.MemGetInfo(); free != 98*page {
		t.Errorf("free before reset = %d, want %d (the pool retains)", free, 98*page)
	}
	if err := h.ResetAsyncPool(); err != nil {
		t.Fatal(err)
	}
	cur, high, _ := h.AsyncPoolReserved()
	free, _, _ := h.MemGetInfo()
	if cur != 0 || high != 0 || free != 100*page {
		t.Errorf("after reset: reserved %d, high %d, free %d; want 0, 0, %d", cur, high, free, 100*page)
	}
	if _, err := h.AllocAsync(1, s1); err == nil {
		t.Errorf("AllocAsync on a destroyed stream succeeded")
	}
}

func TestHostBackendDescriptionSaysHost(t *testing.T) {
	h := New(1 << 30)
	if got := h.Description(); got != "backend host: measured HOST memory (mmap), not GPU; capacity 1073741824 bytes" {
		t.Errorf("Description = %q", got)
	}
	if h.Name() != "host" || !h.IsHost() {
		t.Errorf("Name %q, IsHost %v", h.Name(), h.IsHost())
	}
}

func TestHostBackendAsyncTrimsBeforeFailing(t *testing.T) {
	h := New(4 * page)
	defer h.Close()
	s, _ := h.CreateStream()
	a, _ := h.AllocAsync(3*page, s)
	if err := h.FreeAsync(a, s); err != nil {
		t.Fatal(err)
	}
	b, err := h.AllocAsync(2*page, s) // 3 retained + 2 > 4: the retained 3 pages are unmapped first
	if err != nil {
		t.Fatalf("AllocAsync after trim: %v", err)
	}
	if cur, high, _ := h.AsyncPoolReserved(); cur != 2*page || high != 3*page || h.maps.Len() != 1 {
		t.Errorf("reserved %d, high %d, mappings %d; want %d, %d, 1", cur, high, h.maps.Len(), 2*page, 3*page)
	}
	if _, err := h.AllocAsync(3*page, s); !errors.Is(err, pool.ErrOutOfMemory) {
		t.Errorf("AllocAsync beyond capacity with nothing to trim: err = %v", err)
	}
	_ = h.FreeAsync(b, s)
}

func TestHostRegistered(t *testing.T) {
	b, err := backend.Open("host", backend.Options{HostCapacityBytes: 10 * page})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, total, _ := b.MemGetInfo(); b.Name() != "host" || total != 10*page {
		t.Errorf("Open(host): name %q, capacity %d; want host, %d", b.Name(), total, 10*page)
	}
}
