package poolsim

import (
	"errors"
	"testing"

	"github.com/allocscope/allocscope/internal/upstreams"
)

const mib = 1 << 20

func mustReserve(t *testing.T, u *Upstream, size, want uint64) {
	t.Helper()
	addr, err := u.Reserve(size)
	if err != nil || addr != want {
		t.Fatalf("Reserve(%d) = %#x, %v; want %#x", size, addr, err, want)
	}
}

func TestUpstreamPlacement(t *testing.T) {
	u := NewUpstream(0, 2*mib)
	const b = Base
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
	want := Stats{ReservedBytes: 22 * mib, PeakReservedBytes: 22 * mib, Regions: 7, Reserves: 11, Releases: 4}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestUpstreamErrors(t *testing.T) {
	u := NewUpstream(4*mib, 2*mib)
	mustReserve(t, u, 3*mib, Base)
	if _, err := u.Reserve(1); !errors.Is(err, upstreams.OutOfMemory) {
		t.Fatalf("Reserve past capacity = %v, want upstreams.OutOfMemory", err)
	}
	if _, err := u.Reserve(0); err == nil {
		t.Fatal("Reserve(0) succeeded")
	}
	if err := u.Release(Base+2*mib, 2*mib); !errors.Is(err, upstreams.UnknownAddress) {
		t.Fatalf("Release of an unknown range = %v, want upstreams.UnknownAddress", err)
	}
	if err := u.Release(Base, 6*mib); !errors.Is(err, upstreams.UnknownAddress) {
		t.Fatalf("Release with the wrong size = %v, want upstreams.UnknownAddress", err)
	}
	if err := u.Release(Base, 3*mib); err != nil {
		t.Fatal(err)
	}
	want := Stats{PeakReservedBytes: 4 * mib, Reserves: 1, Releases: 1, Failures: 1}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestUpstreamMapper(t *testing.T) {
	u := NewUpstream(8*mib, 2*mib)
	va, err := u.ReserveAddress(20 * mib)
	if err != nil || va != Base {
		t.Fatalf("ReserveAddress = %#x, %v", va, err)
	}
	mustReserve(t, u, 1, Base+20*mib) // address space occupies addresses but not capacity
	if err := u.Map(va, 4*mib); err != nil {
		t.Fatal(err)
	}
	if err := u.Map(va+4*mib, 2*mib); err != nil { // merges with the first mapping
		t.Fatal(err)
	}
	checks := []struct {
		addr, size uint64
		want       bool
	}{{va, 6 * mib, true}, {va + 6*mib - 1, 2, false}, {va + 10*mib, 1, false}, {Base + 20*mib, 2 * mib, true}, {Base + 22*mib, 1, false}}
	for _, c := range checks {
		if got := u.Contains(c.addr, c.size); got != c.want {
			t.Errorf("Contains(%#x, %d) = %v, want %v", c.addr, c.size, got, c.want)
		}
	}
	if err := u.Map(va+2*mib, 2*mib); err == nil {
		t.Fatal("Map over mapped pages succeeded")
	}
	if err := u.Map(va+6*mib, 2*mib); !errors.Is(err, upstreams.OutOfMemory) { // 6 + 2 reserved + 2 > 8
		t.Fatalf("Map past capacity = %v, want upstreams.OutOfMemory", err)
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
	if err := u.Unmap(va, 2*mib); !errors.Is(err, upstreams.UnknownAddress) {
		t.Fatalf("Unmap of unmapped pages = %v, want upstreams.UnknownAddress", err)
	}
	if err := u.ReleaseAddress(va, 20*mib); err != nil {
		t.Fatal(err)
	}
	want := Stats{ReservedBytes: 2 * mib, PeakReservedBytes: 8 * mib, Regions: 1, Reserves: 1, Maps: 2, Unmaps: 3, Failures: 1}
	if got := u.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// TestUpstreamAddressSpaceExhausted: the top never passes the end of the 2^63-byte space.
func TestUpstreamAddressSpaceExhausted(t *testing.T) {
	u := NewUpstream(0, 2*mib)
	mustReserve(t, u, 1<<62, Base)
	mustReserve(t, u, 1<<62, Base+1<<62)
	if _, err := u.Reserve(2 * mib); !errors.Is(err, upstreams.OutOfMemory) {
		t.Fatalf("Reserve past the address space = %v, want upstreams.OutOfMemory", err)
	}
	if err := u.Release(Base+1<<62, 1<<62); err != nil { // the top comes down
		t.Fatal(err)
	}
	mustReserve(t, u, 2*mib, Base+1<<62)
}

// TestUpstreamReuseBound: at most maxReusable freed ranges wait for reuse; one freed beyond
// that is not handed out again.
func TestUpstreamReuseBound(t *testing.T) {
	u := NewUpstream(0, 1)
	for i := range uint64(maxReusable + 2) {
		mustReserve(t, u, 1, Base+i)
	}
	for i := range uint64(maxReusable + 1) { // the range at the top stays live
		if err := u.Release(Base+i, 1); err != nil {
			t.Fatal(err)
		}
	}
	if u.nReusable != maxReusable {
		t.Fatalf("%d ranges kept for reuse, want %d", u.nReusable, maxReusable)
	}
	mustReserve(t, u, 1, Base+maxReusable-1) // the most recently kept one
	mustReserve(t, u, 2, Base+maxReusable+2) // no range of 2 bytes freed: the top
}
