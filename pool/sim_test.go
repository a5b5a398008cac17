package pool

import (
	"errors"
	"testing"
)

const mib = 1 << 20

func mustReserve(t *testing.T, u *SimUpstream, size, want uint64) {
	t.Helper()
	addr, err := u.Reserve(size)
	if err != nil || addr != want {
		t.Fatalf("Reserve(%d) = %#x, %v; want %#x", size, addr, err, want)
	}
}

func TestSimUpstreamPlacement(t *testing.T) {
	u := NewSimUpstream(0, 2*mib)
	const b = SimBase
	mustReserve(t, u, 1, b)
	mustReserve(t, u, 6*mib, b+2*mib)
	mustReserve(t, u, 2*mib, b+8*mib)
	mustReserve(t, u, 3*mib, b+10*mib) // rounded to 4 MiB
	mustReserve(t, u, 2*mib, b+14*mib)
	for _, r := range []struct{ addr, size uint64 }{{b + 2*mib, 6 * mib}, {b + 8*mib, 2 * mib}, {b + 10*mib, 3 * mib}} {
		if err := u.Release(r.addr, r.size); err != nil {
			t.Fatal(err)
		}
	}
	mustReserve(t, u, 4*mib, b+10*mib) // the freed range of exactly that size
	mustReserve(t, u, 1*mib, b+8*mib)  // rounded to 2 MiB: the freed 2 MiB range
	mustReserve(t, u, 4*mib, b+16*mib) // no 4 MiB range left (the 6 MiB one is not cut): the top
	mustReserve(t, u, 2*mib, b+20*mib)
	if err := u.Release(b+20*mib, 2*mib); err != nil {
		t.Fatal(err)
	}
	mustReserve(t, u, 2*mib, b+20*mib) // the top came back down
	mustReserve(t, u, 6*mib, b+2*mib)
	want := SimStats{ReservedBytes: 22 * mib, PeakReservedBytes: 22 * mib, Regions: 7, Reserves: 11, Releases: 4}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestSimUpstreamErrors(t *testing.T) {
	u := NewSimUpstream(4*mib, 2*mib)
	mustReserve(t, u, 3*mib, SimBase)
	if _, err := u.Reserve(1); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Reserve past capacity = %v, want ErrOutOfMemory", err)
	}
	if _, err := u.Reserve(0); err == nil {
		t.Fatal("Reserve(0) succeeded")
	}
	if err := u.Release(SimBase+2*mib, 2*mib); !errors.Is(err, ErrUnknownAddress) {
		t.Fatalf("Release of an unknown range = %v, want ErrUnknownAddress", err)
	}
	if err := u.Release(SimBase, 6*mib); !errors.Is(err, ErrUnknownAddress) {
		t.Fatalf("Release with the wrong size = %v, want ErrUnknownAddress", err)
	}
	if err := u.Release(SimBase, 3*mib); err != nil {
		t.Fatal(err)
	}
	want := SimStats{PeakReservedBytes: 4 * mib, Reserves: 1, Releases: 1, Failures: 1}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestSimUpstreamMapper(t *testing.T) {
	u := NewSimUpstream(8*mib, 2*mib)
	va, err := u.ReserveAddress(20 * mib)
	if err != nil || va != SimBase {
		t.Fatalf("ReserveAddress = %#x, %v", va, err)
	}
	mustReserve(t, u, 1, SimBase+20*mib) // address space occupies addresses but not capacity
	if err := u.Map(va, 4*mib); err != nil {
		t.Fatal(err)
	}
	if err := u.Map(va+4*mib, 2*mib); err != nil { // merges with the first mapping
		t.Fatal(err)
	}
	checks := []struct {
		addr, size uint64
		want       bool
	}{{va, 6 * mib, true}, {va + 6*mib - 1, 2, false}, {va + 10*mib, 1, false}, {SimBase + 20*mib, 2 * mib, true}, {SimBase + 22*mib, 1, false}}
	for _, c := range checks {
		if got := u.Contains(c.addr, c.size); got != c.want {
			t.Errorf("Contains(%#x, %d) = %v, want %v", c.addr, c.size, got, c.want)
		}
	}
	if err := u.Map(va+2*mib, 2*mib); err == nil {
		t.Fatal("Map over mapped pages succeeded")
	}
	if err := u.Map(va+6*mib, 2*mib); !errors.Is(err, ErrOutOfMemory) { // 6 + 2 reserved + 2 > 8
		t.Fatalf("Map past capacity = %v, want ErrOutOfMemory", err)
	}
	if err := u.Map(va+1, 2*mib); err == nil {
		t.Fatal("unaligned Map succeeded")
	}
	if err := u.Unmap(va+2*mib, 2*mib); err != nil { // splits the mapping in two
		t.Fatal(err)
	}
	if u.Contains(va, 4*mib) || !u.Contains(va+4*mib, 2*mib) {
		t.Fatal("Contains wrong after a partial Unmap")
	}
	if err := u.ReleaseAddress(va, 20*mib); err == nil {
		t.Fatal("ReleaseAddress with pages mapped succeeded")
	}
	for _, r := range [][2]uint64{{va, 2 * mib}, {va + 4*mib, 2 * mib}} {
		if err := u.Unmap(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Unmap(va, 2*mib); !errors.Is(err, ErrUnknownAddress) {
		t.Fatalf("Unmap of unmapped pages = %v, want ErrUnknownAddress", err)
	}
	if err := u.ReleaseAddress(va, 20*mib); err != nil {
		t.Fatal(err)
	}
	want := SimStats{ReservedBytes: 2 * mib, PeakReservedBytes: 8 * mib, Regions: 1, Reserves: 1, Maps: 2, Unmaps: 3, Failures: 1}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// TestSimUpstreamAddressSpaceExhausted: the top never passes the end of the 2^63-byte space.
func TestSimUpstreamAddressSpaceExhausted(t *testing.T) {
	u := NewSimUpstream(0, 2*mib)
	mustReserve(t, u, 1<<62, SimBase)
	mustReserve(t, u, 1<<62, SimBase+1<<62)
	if _, err := u.Reserve(2 * mib); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Reserve past the address space = %v, want ErrOutOfMemory", err)
	}
	if err := u.Release(SimBase+1<<62, 1<<62); err != nil { // the top comes down
		t.Fatal(err)
	}
	mustReserve(t, u, 2*mib, SimBase+1<<62)
}

// TestSimUpstreamReuseBound: at most maxReusable freed ranges wait for reuse; one freed beyond
// that is not handed out again.
func TestSimUpstreamReuseBound(t *testing.T) {
	u := NewSimUpstream(0, 1)
	for i := range uint64(maxReusable + 2) {
		mustReserve(t, u, 1, SimBase+i)
	}
	for i := range uint64(maxReusable + 1) { // the range at the top stays live
		if err := u.Release(SimBase+i, 1); err != nil {
			t.Fatal(err)
		}
	}
	if u.nReusable != maxReusable {
		t.Fatalf("%d ranges kept for reuse, want %d", u.nReusable, maxReusable)
	}
	mustReserve(t, u, 1, SimBase+maxReusable-1) // the most recently kept one
	mustReserve(t, u, 2, SimBase+maxReusable+2) // no range of 2 bytes freed: the top
}
