package host

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/replay/internal/addrset"
	"github.com/allocscope/allocscope/pool"
)

// The host backend is a pool.Mapper, so that PyTorch's expandable segments replay on it:
// ReserveAddress is an inaccessible mapping (PROT_NONE, MAP_NORESERVE) that holds no memory; Map
// makes pages of it readable and writable and counts them against the capacity like Reserve;
// Unmap drops their contents (MADV_DONTNEED) and makes them inaccessible again; Remap is an
// Unmap and a Map (host memory has no physical pages to move).

var _ pool.Remapper = (*Backend)(nil)

// ReserveAddress reserves size bytes (page-rounded) of address space with no memory behind it.
func (h *Backend) ReserveAddress(size uint64) (uint64, error) {
	length := h.roundUp(size)
	if length == 0 || length > maxHostAddressSpace {
		return 0, fmt.Errorf("host backend: reserve %d bytes of address space: size out of range", size)
	}
	data, err := unix.Mmap(-1, 0, int(length), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("host backend: reserve %d bytes of address space: mmap: %w (%w)", length, err, pool.ErrOutOfMemory)
	}
	addr := addrOf(data)
	h.vas.Insert(addrset.Span{Addr: addr, Size: length, Data: data})
	return addr, nil
}

// maxHostAddressSpace is the largest address reservation the host backend makes (64 TiB; x86-64
// user space has 128 TiB).
const maxHostAddressSpace = 1 << 46

// ReleaseAddress unmaps address space from ReserveAddress; size must be the size it was reserved
// with and none of it may be mapped.
func (h *Backend) ReleaseAddress(addr, size uint64) error {
	r, ok := h.vas.Get(addr)
	if !ok {
		return fmt.Errorf("host backend: release address space at %#x: no such reservation: %w", addr, pool.ErrUnknownAddress)
	}
	if r.Size != h.roundUp(size) {
		return fmt.Errorf("host backend: release address space at %#x with size %d, reserved with %d", addr, size, r.Size)
	}
	if m, ok := h.pages.Overlapping(r.Addr, r.Size); ok {
		return fmt.Errorf("host backend: release address space at %#x: [%#x, %#x) is still mapped", addr, m.Addr, m.End())
	}
	h.vas.Remove(addr)
	if err := unix.Munmap(r.Data); err != nil {
		return fmt.Errorf("host backend: munmap address space at %#x: %w", addr, err)
	}
	return nil
}

// Map makes [addr, addr+size) of one address reservation readable and writable. addr and size
// must be multiples of the page size and the range must not be mapped yet. The bytes count
// against the capacity: beyond it Map fails with pool.ErrOutOfMemory.
func (h *Backend) Map(addr, size uint64) error {
	r, err := h.reservation("map", addr, size)
	if err != nil {
		return err
	}
	if m, ok := h.pages.Overlapping(addr, size); ok {
		return fmt.Errorf("host backend: map [%#x, %#x): overlaps mapped [%#x, %#x)", addr, addr+size, m.Addr, m.End())
	}
	if size > h.capacity-h.mapped {
		return fmt.Errorf("host backend: map %d bytes with %d of %d mapped: %w", size, h.mapped, h.capacity, pool.ErrOutOfMemory)
	}
	if err := unix.Mprotect(r.Bytes(addr, size), unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return fmt.Errorf("host backend: map [%#x, %#x): mprotect: %w", addr, addr+size, err)
	}
	h.pages.InsertMerged(addrset.Span{Addr: addr, Size: size}, r.Addr, r.End())
	h.mapped += size
	return nil
}

// Unmap gives back the memory behind [addr, addr+size), which must be mapped, and makes the range
// inaccessible; its contents are lost.
func (h *Backend) Unmap(addr, size uint64) error {
	r, err := h.reservation("unmap", addr, size)
	if err != nil {
		return err
	}
	if _, ok := h.pages.Containing(addr, size); !ok {
		return fmt.Errorf("host backend: unmap [%#x, %#x): not mapped: %w", addr, addr+size, pool.ErrUnknownAddress)
	}
	b := r.Bytes(addr, size)
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("host backend: unmap [%#x, %#x): madvise: %w", addr, addr+size, err)
	}
	if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
		return fmt.Errorf("host backend: unmap [%#x, %#x): mprotect: %w", addr, addr+size, err)
	}
	h.pages.Cut(addr, size)
	h.mapped -= size
	return nil
}

// Remap gives back the memory behind [from, from+size), which must be mapped, and maps as much at
// [to, to+size), which must not be: Unmap and Map, the capacity unchanged in between.
func (h *Backend) Remap(from, to, size uint64) error {
	if _, err := h.reservation("remap", to, size); err != nil {
		return err
	}
	if m, ok := h.pages.Overlapping(to, size); ok {
		return fmt.Errorf("host backend: remap to [%#x, %#x): overlaps mapped [%#x, %#x)", to, to+size, m.Addr, m.End())
	}
	if err := h.Unmap(from, size); err != nil {
		return err
	}
	return h.Map(to, size)
}

// reservation checks that [addr, addr+size) is a non-empty, page-aligned range inside one address
// reservation, and returns that reservation.
func (h *Backend) reservation(call string, addr, size uint64) (addrset.Span, error) {
	if size == 0 || addr%h.pageSize != 0 || size%h.pageSize != 0 {
		return addrset.Span{}, fmt.Errorf("host backend: %s %d bytes at %#x: not a non-empty multiple of the %d-byte page", call, size, addr, h.pageSize)
	}
	r, ok := h.vas.Containing(addr, size)
	if !ok || addr+size < addr {
		return addrset.Span{}, fmt.Errorf("host backend: %s [%#x, %#x): not inside reserved address space: %w", call, addr, addr+size, pool.ErrUnknownAddress)
	}
	return r, nil
}

// mappedBlock returns the host bytes of [addr, addr+size) when they are mapped pages of one
// address reservation.
func (h *Backend) mappedBlock(addr, size uint64) ([]byte, bool) {
	r, ok := h.vas.Containing(addr, size)
	if !ok {
		return nil, false
	}
	if _, ok := h.pages.Containing(addr, size); !ok {
		return nil, false
	}
	return r.Bytes(addr, size), true
}

// Reservations returns the number of address reservations (ReserveAddress) not yet released.
func (h *Backend) Reservations() int { return h.vas.Len() }

// closeAddressSpace unmaps every address reservation, mapped pages included.
func (h *Backend) closeAddressSpace() error {
	var errs []error
	h.vas.Each(func(r addrset.Span) bool {
		errs = append(errs, unix.Munmap(r.Data))
		return true
	})
	h.pages.Each(func(m addrset.Span) bool { h.mapped -= m.Size; return true })
	h.vas.Clear()
	h.pages.Clear()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host backend: munmap address space: %w", err)
	}
	return nil
}
