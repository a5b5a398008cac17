//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <string.h>

// The virtual memory management API (cuMemAddressReserve, cuMemCreate, cuMemMap, ...), which
// gorgonia.org/cu does not bind: properties of pinned memory on one device, and read/write access
// for that device.

static void allocscope_device_prop(CUdevice dev, CUmemAllocationProp *prop) {
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = (int)dev;
}

static void allocscope_device_access(CUdevice dev, CUmemAccessDesc *desc) {
	memset(desc, 0, sizeof(*desc));
	desc->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc->location.id = (int)dev;
	desc->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/allocscope/allocscope/internal/replay/internal/addrset"
	"github.com/allocscope/allocscope/pool"
)

// The CUDA backend is a pool.Mapper, so that PyTorch's expandable segments replay on the GPU as
// PyTorch runs them: ReserveAddress is cuMemAddressReserve, Map backs pages with cuMemCreate
// (pinned device memory) + cuMemMap + cuMemSetAccess, Unmap is cuMemUnmap + cuMemRelease, and
// ReleaseAddress is cuMemAddressFree.
//
// cuMemUnmap cannot unmap part of one cuMemMap, and the pool unmaps parts of what it mapped in one
// call (the whole pages inside a free block; see pool/expandable.go). So every page of the
// allocation granularity (cuMemGetAllocationGranularity, 2 MiB on current GPUs) has a physical
// allocation and a mapping of its own, and any granularity-aligned range can be unmapped. PyTorch
// itself makes one handle per segment page (2 MiB small, 20 MiB large); per granule is finer, so a
// large Map costs more driver calls here than in PyTorch, but it unmaps exactly what it is asked.

var _ pool.Remapper = (*Backend)(nil)

// vmState is the CUDA backend's state for the Mapper.
type vmState struct {
	granularity uint64                                    // 0 until first asked
	vas         *addrset.Set                              // address reservations
	pages       *addrset.Set                              // mapped ranges, merged within one reservation
	handles     map[uint64]C.CUmemGenericAllocationHandle // page address → its physical allocation
	// rangeUnmap says whether one cuMemUnmap may cover several pages mapped one by one: 0 not
	// tried yet, 1 yes, -1 no (the driver refused; pages are then unmapped one by one).
	rangeUnmap int8
}

func newVMState() vmState {
	return vmState{vas: addrset.New(), pages: addrset.New(), handles: make(map[uint64]C.CUmemGenericAllocationHandle)}
}

// pageSize returns the device's minimum allocation granularity for pinned memory.
func (b *Backend) pageSize() (uint64, error) {
	if b.vm.granularity != 0 {
		return b.vm.granularity, nil
	}
	var prop C.CUmemAllocationProp
	C.allocscope_device_prop(C.CUdevice(b.dev), &prop)
	var g C.size_t
	if err := check("cuMemGetAllocationGranularity",
		C.cuMemGetAllocationGranularity(&g, &prop, C.CU_MEM_ALLOC_GRANULARITY_MINIMUM)); err != nil {
		return 0, err
	}
	b.vm.granularity = uint64(g)
	return b.vm.granularity, nil
}

// ReserveAddress reserves size bytes, rounded up to the granularity, of device address space
// (cuMemAddressReserve) with no memory behind it.
func (b *Backend) ReserveAddress(size uint64) (uint64, error) {
	g, err := b.pageSize()
	if err != nil {
		return 0, fmt.Errorf("backend cuda: reserve %d bytes of address space: %w", size, err)
	}
	length := pool.AlignUp(size, g)
	if size == 0 || length < size {
		return 0, fmt.Errorf("backend cuda: reserve %d bytes of address space: size out of range", size)
	}
	var p C.CUdeviceptr
	if err := check("cuMemAddressReserve", C.cuMemAddressReserve(&p, C.size_t(length), 0, 0, 0)); err != nil {
		return 0, fmt.Errorf("backend cuda: reserve %d bytes of address space: %w", length, err)
	}
	b.vm.vas.Insert(addrset.Span{Addr: uint64(p), Size: length})
	return uint64(p), nil
}

// ReleaseAddress frees address space from ReserveAddress (cuMemAddressFree); size must be the size
// it was reserved with and none of it may be mapped.
func (b *Backend) ReleaseAddress(addr, size uint64) error {
	r, ok := b.vm.vas.Get(addr)
	if !ok {
		return fmt.Errorf("backend cuda: release address space at %#x: no such reservation: %w", addr, pool.ErrUnknownAddress)
	}
	if g, _ := b.pageSize(); r.Size != (size+g-1)/g*g {
		return fmt.Errorf("backend cuda: release address space at %#x with size %d, reserved with %d", addr, size, r.Size)
	}
	if m, ok := b.vm.pages.Overlapping(r.Addr, r.Size); ok {
		return fmt.Errorf("backend cuda: release address space at %#x: [%#x, %#x) is still mapped", addr, m.Addr, m.End())
	}
	if err := check("cuMemAddressFree", C.cuMemAddressFree(C.CUdeviceptr(addr), C.size_t(r.Size))); err != nil {
		return fmt.Errorf("backend cuda: release address space at %#x: %w", addr, err)
	}
	b.vm.vas.Remove(addr)
	return nil
}

// Map backs [addr, addr+size) of one address reservation with device memory, one physical
// allocation per page of the granularity, readable and writable by the device. addr and size must
// be multiples of the granularity and the range must not be mapped yet. A failure (e.g.
// CUDA_ERROR_OUT_OF_MEMORY, which matches pool.ErrOutOfMemory) leaves nothing of the range mapped.
func (b *Backend) Map(addr, size uint64) error {
	r, g, err := b.mapRange("map", addr, size)
	if err != nil {
		return err
	}
	if m, ok := b.vm.pages.Overlapping(addr, size); ok {
		return fmt.Errorf("backend cuda: map [%#x, %#x): overlaps mapped [%#x, %#x)", addr, addr+size, m.Addr, m.End())
	}
	var prop C.CUmemAllocationProp
	C.allocscope_device_prop(C.CUdevice(b.dev), &prop)
	for page := addr; page < addr+size; page += g {
		if err := b.mapPage(page, g, &prop); err != nil {
			return errors.Join(fmt.Errorf("backend cuda: map %d bytes at %#x: %w", size, addr, err), b.unmapPages(addr, page, g))
		}
	}
	var access C.CUmemAccessDesc
	C.allocscope_device_access(C.CUdevice(b.dev), &access)
	if err := check("cuMemSetAccess", C.cuMemSetAccess(C.CUdeviceptr(addr), C.size_t(size), &access, 1)); err != nil {
		return errors.Join(fmt.Errorf("backend cuda: map %d bytes at %#x: %w", size, addr, err), b.unmapPages(addr, addr+size, g))
	}
	b.vm.pages.InsertMerged(addrset.Span{Addr: addr, Size: size}, r.Addr, r.End())
	return nil
}

// mapPage creates one page of g bytes of device memory and maps it at page.
func (b *Backend) mapPage(page, g uint64, prop *C.CUmemAllocationProp) error {
	var h C.CUmemGenericAllocationHandle
	if err := check("cuMemCreate", C.cuMemCreate(&h, C.size_t(g), prop, 0)); err != nil {
		return err
	}
	if err := check("cuMemMap", C.cuMemMap(C.CUdeviceptr(page), C.size_t(g), 0, h, 0)); err != nil {
		return errors.Join(err, check("cuMemRelease", C.cuMemRelease(h)))
	}
	b.vm.handles[page] = h
	return nil
}

// Unmap unmaps [addr, addr+size), which must be mapped, page by page and releases the pages'
// memory (cuMemUnmap, cuMemRelease); addr and size must be multiples of the granularity.
func (b *Backend) Unmap(addr, size uint64) error {
	_, g, err := b.mapRange("unmap", addr, size)
	if err != nil {
		return err
	}
	if _, ok := b.vm.pages.Containing(addr, size); !ok {
		return fmt.Errorf("backend cuda: unmap [%#x, %#x): not mapped: %w", addr, addr+size, pool.ErrUnknownAddress)
	}
	if err := b.unmapPages(addr, addr+size, g); err != nil {
		return fmt.Errorf("backend cuda: unmap [%#x, %#x): %w", addr, addr+size, err)
	}
	b.vm.pages.Cut(addr, size)
	return nil
}

// Remap moves the device memory behind [from, from+size), which must be mapped, to
// [to, to+size), which must not be: per page cuMemUnmap and cuMemMap of the same physical
// allocation, then one cuMemSetAccess, without releasing or creating memory. Both ranges must be
// granularity-aligned and inside address reservations. A failure leaves the pages moved so far
// at their new place and reports the CUDA error.
func (b *Backend) Remap(from, to, size uint64) error {
	rt, g, err := b.mapRange("remap", to, size)
	if err != nil {
		return err
	}
	if _, _, err := b.mapRange("remap", from, size); err != nil {
		return err
	}
	if _, ok := b.vm.pages.Containing(from, size); !ok {
		return fmt.Errorf("backend cuda: remap from [%#x, %#x): not mapped: %w", from, from+size, pool.ErrUnknownAddress)
	}
	if m, ok := b.vm.pages.Overlapping(to, size); ok {
		return fmt.Errorf("backend cuda: remap to [%#x, %#x): overlaps mapped [%#x, %#x)", to, to+size, m.Addr, m.End())
	}
	if size > g && b.unmapRange(from, size) {
		for off := uint64(0); off < size; off += g {
			if err := b.mapHandle(from+off, to+off, g); err != nil {
				return fmt.Errorf("backend cuda: remap %d bytes from %#x to %#x: %w", size, from, to, err)
			}
			b.vm.pages.Cut(from+off, g)
			b.vm.pages.InsertMerged(addrset.Span{Addr: to + off, Size: g}, rt.Addr, rt.End())
		}
	} else {
		for off := uint64(0); off < size; off += g {
			if err := b.movePage(from+off, to+off, g); err != nil {
				return fmt.Errorf("backend cuda: remap %d bytes from %#x to %#x: %w", size, from, to, err)
			}
			b.vm.pages.Cut(from+off, g)
			b.vm.pages.InsertMerged(addrset.Span{Addr: to + off, Size: g}, rt.Addr, rt.End())
		}
	}
	var access C.CUmemAccessDesc
	C.allocscope_device_access(C.CUdevice(b.dev), &access)
	if err := check("cuMemSetAccess", C.cuMemSetAccess(C.CUdeviceptr(to), C.size_t(size), &access, 1)); err != nil {
		return fmt.Errorf("backend cuda: remap %d bytes to %#x: %w", size, to, err)
	}
	return nil
}

// movePage unmaps the page at from and maps its physical allocation at to.
func (b *Backend) movePage(from, to, g uint64) error {
	if err := check("cuMemUnmap", C.cuMemUnmap(C.CUdeviceptr(from), C.size_t(g))); err != nil {
		return err
	}
	return b.mapHandle(from, to, g)
}

// mapHandle maps at to the physical allocation of the page that was mapped at from (unmapped now).
func (b *Backend) mapHandle(from, to, g uint64) error {
	h := b.vm.handles[from]
	delete(b.vm.handles, from)
	if err := check("cuMemMap", C.cuMemMap(C.CUdeviceptr(to), C.size_t(g), 0, h, 0)); err != nil {
		return errors.Join(err, check("cuMemRelease", C.cuMemRelease(h)))
	}
	b.vm.handles[to] = h
	return nil
}

// unmapRange unmaps [addr, addr+size), pages mapped one by one, with a single cuMemUnmap when the
// driver allows it, and reports whether it did; when it does not (remembered), nothing is unmapped.
func (b *Backend) unmapRange(addr, size uint64) bool {
	if b.vm.rangeUnmap < 0 {
		return false
	}
	if C.cuMemUnmap(C.CUdeviceptr(addr), C.size_t(size)) != C.CUDA_SUCCESS {
		b.vm.rangeUnmap = -1
		return false
	}
	b.vm.rangeUnmap = 1
	return true
}

// unmapPages unmaps and releases the pages of [from, to) that Map created, stopping at the first
// failure (the pages not unmapped stay recorded).
func (b *Backend) unmapPages(from, to, g uint64) error {
	whole := to-from > g && b.allMapped(from, to, g) && b.unmapRange(from, to-from)
	for page := from; page < to; page += g {
		h, ok := b.vm.handles[page]
		if !ok {
			continue
		}
		if whole {
			delete(b.vm.handles, page)
			if err := check("cuMemRelease", C.cuMemRelease(h)); err != nil {
				return err
			}
			continue
		}
		if err := check("cuMemUnmap", C.cuMemUnmap(C.CUdeviceptr(page), C.size_t(g))); err != nil {
			return err
		}
		delete(b.vm.handles, page)
		if err := check("cuMemRelease", C.cuMemRelease(h)); err != nil {
			return err
		}
	}
	return nil
}

// allMapped reports whether every page of [from, to) has a physical allocation mapped.
func (b *Backend) allMapped(from, to, g uint64) bool {
	for page := from; page < to; page += g {
		if _, ok := b.vm.handles[page]; !ok {
			return false
		}
	}
	return true
}

// mapRange checks that [addr, addr+size) is a non-empty, granularity-aligned range inside one
// address reservation, and returns the reservation and the granularity.
func (b *Backend) mapRange(call string, addr, size uint64) (addrset.Span, uint64, error) {
	g, err := b.pageSize()
	if err != nil {
		return addrset.Span{}, 0, fmt.Errorf("backend cuda: %s %d bytes at %#x: %w", call, size, addr, err)
	}
	if size == 0 || addr%g != 0 || size%g != 0 {
		return addrset.Span{}, 0, fmt.Errorf("backend cuda: %s %d bytes at %#x: not a non-empty multiple of the %d-byte granularity", call, size, addr, g)
	}
	r, ok := b.vm.vas.Containing(addr, size)
	if !ok || addr+size < addr {
		return addrset.Span{}, 0, fmt.Errorf("backend cuda: %s [%#x, %#x): not inside reserved address space: %w", call, addr, addr+size, pool.ErrUnknownAddress)
	}
	return r, g, nil
}

// closeAddressSpace unmaps every mapped page and frees every address reservation.
func (b *Backend) closeAddressSpace() error {
	var errs []error
	for page, h := range b.vm.handles {
		errs = append(errs, check("cuMemUnmap", C.cuMemUnmap(C.CUdeviceptr(page), C.size_t(b.vm.granularity))),
			check("cuMemRelease", C.cuMemRelease(h)))
	}
	b.vm.vas.Each(func(r addrset.Span) bool {
		errs = append(errs, check("cuMemAddressFree", C.cuMemAddressFree(C.CUdeviceptr(r.Addr), C.size_t(r.Size))))
		return true
	})
	b.vm = newVMState()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("backend cuda: free address space: %w", err)
	}
	return nil
}
