package replay

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/pool"
)

// The host backend is a pool.Mapper, so that PyTorch's expandable segments replay on it:
// ReserveAddress is an inaccessible mapping (PROT_NONE, MAP_NORESERVE) that holds no memory; Map
// makes pages of it readable and writable and counts them against the capacity like Reserve;
// Unmap drops their contents (MADV_DONTNEED) and makes them inaccessible again; Remap is an
// Unmap and a Map (host memory has no physical pages to move).

var _ pool.Remapper = (*HostBackend)(nil)

// ReserveAddress reserves size bytes (page-rounded) of address space with no memory behind it.
func (h *HostBackend) ReserveAddress(size uint64) (uint64, error) {
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
	h.vas.insert(span{addr: addr, size: length, data: data})
	return addr, nil
}

// maxHostAddressSpace is the largest address reservation the host backend makes (64 TiB; x86-64
// user space has 128 TiB).
const maxHostAddressSpace = 1 << 46

// ReleaseAddress unmaps address space from ReserveAddress; size must be the size it was reserved
// with and none of it may be mapped.
func (h *HostBackend) ReleaseAddress(addr, size uint64) error {
	r, ok := h.vas.get(addr)
	if !ok {
		return fmt.Errorf("host backend: release address space at %#x: no such reservation: %w", addr, pool.ErrUnknownAddress)
	}
	if r.size != h.roundUp(size) {
		return fmt.Errorf("host backend: release address space at %#x with size %d, reserved with %d", addr, size, r.size)
	}
	if m, ok := h.pages.overlapping(r.addr, r.size); ok {
		return fmt.Errorf("host backend: release address space at %#x: [%#x, %#x) is still mapped", addr, m.addr, m.end())
	}
	h.vas.remove(addr)
	if err := unix.Munmap(r.data); err != nil {
		return fmt.Errorf("host backend: munmap address space at %#x: %w", addr, err)
	}
	return nil
}

// Map makes [addr, addr+size) of one address reservation readable and writable. addr and size
// must be multiples of the page size and the range must not be mapped yet. The bytes count
// against the capacity: beyond it Map fails with pool.ErrOutOfMemory.
func (h *HostBackend) Map(addr, size uint64) error {
	r, err := h.reservation("map", addr, size)
	if err != nil {
		return err
	}
	if m, ok := h.pages.overlapping(addr, size); ok {
		return fmt.Errorf("host backend: map [%#x, %#x): overlaps mapped [%#x, %#x)", addr, addr+size, m.addr, m.end())
	}
	if size > h.capacity-h.mapped {
		return fmt.Errorf("host backend: map %d bytes with %d of %d mapped: %w", size, h.mapped, h.capacity, pool.ErrOutOfMemory)
	}
	if err := unix.Mprotect(r.bytes(addr, size), unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return fmt.Errorf("host backend: map [%#x, %#x): mprotect: %w", addr, addr+size, err)
	}
	h.pages.insertMerged(span{addr: addr, size: size}, r.addr, r.end())
	h.mapped += size
	return nil
}

// Unmap gives back the memory behind [addr, addr+size), which must be mapped, and makes the range
// inaccessible; its contents are lost.
func (h *HostBackend) Unmap(addr, size uint64) error {
	r, err := h.reservation("unmap", addr, size)
	if err != nil {
		return err
	}
	if _, ok := h.pages.containing(addr, size); !ok {
		return fmt.Errorf("host backend: unmap [%#x, %#x): not mapped: %w", addr, addr+size, pool.ErrUnknownAddress)
	}
	b := r.bytes(addr, size)
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("host backend: unmap [%#x, %#x): madvise: %w", addr, addr+size, err)
	}
	if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
		return fmt.Errorf("host backend: unmap [%#x, %#x): mprotect: %w", addr, addr+size, err)
	}
	h.pages.cut(addr, size)
	h.mapped -= size
	return nil
}

// Remap gives back the memory behind [from, from+size), which must be mapped, and maps as much at
// [to, to+size), which must not be: Unmap and Map, the capacity unchanged in between.
func (h *HostBackend) Remap(from, to, size uint64) error {
	if _, err := h.reservation("remap", to, size); err != nil {
		return err
	}
	if m, ok := h.pages.overlapping(to, size); ok {
		return fmt.Errorf("host backend: remap to [%#x, %#x): overlaps mapped [%#x, %#x)", to, to+size, m.addr, m.end())
	}
	if err := h.Unmap(from, size); err != nil {
		return err
	}
	return h.Map(to, size)
}

// reservation checks that [addr, addr+size) is a non-empty, page-aligned range inside one address
// reservation, and returns that reservation.
func (h *HostBackend) reservation(call string, addr, size uint64) (span, error) {
	if size == 0 || addr%h.pageSize != 0 || size%h.pageSize != 0 {
		return span{}, fmt.Errorf("host backend: %s %d bytes at %#x: not a non-empty multiple of the %d-byte page", call, size, addr, h.pageSize)
	}
	r, ok := h.vas.containing(addr, size)
	if !ok || addr+size < addr {
		return span{}, fmt.Errorf("host backend: %s [%#x, %#x): not inside reserved address space: %w", call, addr, addr+size, pool.ErrUnknownAddress)
	}
	return r, nil
}

// bytes returns the host bytes of [addr, addr+size), which lies inside s.
func (s span) bytes(addr, size uint64) []byte {
	off := addr - s.addr
	return s.data[off : off+size : off+size]
}

// mappedBlock returns the host bytes of [addr, addr+size) when they are mapped pages of one
// address reservation.
func (h *HostBackend) mappedBlock(addr, size uint64) ([]byte, bool) {
	r, ok := h.vas.containing(addr, size)
	if !ok {
		return nil, false
	}
	if _, ok := h.pages.containing(addr, size); !ok {
		return nil, false
	}
	return r.bytes(addr, size), true
}

// closeAddressSpace unmaps every address reservation, mapped pages included.
func (h *HostBackend) closeAddressSpace() error {
	var errs []error
	h.vas.each(func(r span) bool {
		errs = append(errs, unix.Munmap(r.data))
		return true
	})
	h.pages.each(func(m span) bool { h.mapped -= m.size; return true })
	h.vas.clear()
	h.pages.clear()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host backend: munmap address space: %w", err)
	}
	return nil
}
