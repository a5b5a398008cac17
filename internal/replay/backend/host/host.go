// Package host is replay's host backend: allocation requests replayed on host memory from mmap,
// so that the whole replay path runs without a GPU. It measures HOST memory, not GPU memory.
//
// Importing the package registers the backend as "host" with package internal/replay/backend; New makes one
// directly. Like the CUDA backend it is a pool.Upstream and a pool.Remapper, so it serves
// pool.New too.
package host

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/replay/backend"
	"github.com/allocscope/allocscope/internal/replay/internal/addrset"
	"github.com/allocscope/allocscope/pool"
)

var _ backend.Backend = (*Backend)(nil)

func init() {
	backend.Register("host", func(o backend.Options) (backend.Backend, error) { return New(o.HostCapacityBytes), nil })
}

// DefaultCapacity is the host backend's capacity when none is given: the machine's RAM.
var DefaultCapacity = hostRAM()

func hostRAM() uint64 {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return 1 << 34
	}
	return uint64(info.Totalram) * uint64(info.Unit)
}

// Backend replays on host memory from mmap. It measures HOST memory, not GPU memory; it lets
// the whole replay path (verify and touch included) run without a GPU.
//
//   - Reserve/Release: one anonymous private mapping per call (mmap/munmap), page-rounded. The raw
//     mode is therefore one mmap per allocation.
//   - AllocAsync/FreeAsync: a model of CUDA's retaining stream-ordered pool. Each stream keeps a
//     free list of its freed mappings by size; an allocation takes a mapping of the same
//     page-rounded size freed on the same stream, else maps a new one. Nothing is unmapped until
//     ResetAsyncPool, or until a mapping would exceed the capacity: then, as CUDA's pool does
//     before it fails, every free mapping is unmapped and the allocation tried once more.
//   - ReserveAddress/Map/Unmap/ReleaseAddress (pool.Mapper, for expandable segments; see
//     mapper.go): address space mapped PROT_NONE, whose pages Map makes read/write.
//   - MemGetInfo: capacity minus the bytes mapped now, from its own counters.
//
// Mapped bytes never exceed the capacity: beyond it Reserve, Map and AllocAsync fail with
// pool.ErrOutOfMemory.
type Backend struct {
	capacity    uint64
	pageSize    uint64
	mapped      uint64       // bytes mapped now, all uses
	maps        *addrset.Set // every live mapping of Reserve and AllocAsync, by address
	vas         *addrset.Set // address reservations (ReserveAddress), with their host bytes
	pages       *addrset.Set // mapped ranges inside them (Map), merged within one reservation
	asyncFree   map[backend.Stream]map[uint64][]uint64
	asyncSize   map[uint64]uint64 // AllocAsync mapping → its mapped size
	asyncHeld   uint64            // bytes the async pool holds (in use and free)
	asyncHigh   uint64
	nextStream  backend.Stream
	liveStreams map[backend.Stream]bool
}

// New returns a host backend that may map up to capacity bytes (0 = DefaultCapacity).
func New(capacity uint64) *Backend {
	if capacity == 0 {
		capacity = DefaultCapacity
	}
	return &Backend{
		capacity:    capacity,
		pageSize:    uint64(unix.Getpagesize()),
		maps:        addrset.New(),
		vas:         addrset.New(),
		pages:       addrset.New(),
		asyncFree:   make(map[backend.Stream]map[uint64][]uint64),
		asyncSize:   make(map[uint64]uint64),
		liveStreams: make(map[backend.Stream]bool),
	}
}

// Name returns "host".
func (h *Backend) Name() string { return "host" }

// IsHost returns true.
func (h *Backend) IsHost() bool { return true }

// Description says plainly that host memory is measured.
func (h *Backend) Description() string {
	return fmt.Sprintf("backend host: measured HOST memory (mmap), not GPU; capacity %d bytes", h.capacity)
}

// roundUp rounds size up to whole pages.
func (h *Backend) roundUp(size uint64) uint64 { return pool.AlignUp(size, h.pageSize) }

// mmap maps size bytes (page-rounded) and records the mapping.
func (h *Backend) mmap(size uint64) (uint64, uint64, error) {
	length := h.roundUp(size)
	if length == 0 || length > h.capacity-h.mapped {
		return 0, 0, fmt.Errorf("host backend: map %d bytes with %d of %d mapped: %w", size, h.mapped, h.capacity, pool.ErrOutOfMemory)
	}
	data, err := unix.Mmap(-1, 0, int(length), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, 0, fmt.Errorf("host backend: mmap %d bytes: %w (%w)", length, err, pool.ErrOutOfMemory)
	}
	addr := addrOf(data)
	h.maps.Insert(addrset.Span{Addr: addr, Size: length, Data: data})
	h.mapped += length
	return addr, length, nil
}

// addrOf returns the address of a mapping's first byte.
func addrOf(data []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&data[0]))) }

// munmap unmaps the mapping that starts at addr.
func (h *Backend) munmap(addr uint64) error {
	m, ok := h.maps.Remove(addr)
	if !ok {
		return fmt.Errorf("host backend: unmap %#x: %w", addr, pool.ErrUnknownAddress)
	}
	h.mapped -= m.Size
	if err := unix.Munmap(m.Data); err != nil {
		return fmt.Errorf("host backend: munmap %#x: %w", addr, err)
	}
	return nil
}

// Reserve maps size bytes.
func (h *Backend) Reserve(size uint64) (uint64, error) {
	addr, _, err := h.mmap(size)
	return addr, err
}

// Release unmaps a region from Reserve; size must be the size it was reserved with.
func (h *Backend) Release(addr, size uint64) error {
	m, ok := h.maps.Get(addr)
	if !ok {
		return fmt.Errorf("host backend: release %#x: %w", addr, pool.ErrUnknownAddress)
	}
	if m.Size != h.roundUp(size) {
		return fmt.Errorf("host backend: release %#x with size %d, reserved with %d", addr, size, m.Size)
	}
	return h.munmap(addr)
}

// CreateStream returns a new stream handle.
func (h *Backend) CreateStream() (backend.Stream, error) {
	h.nextStream++
	h.liveStreams[h.nextStream] = true
	h.asyncFree[h.nextStream] = make(map[uint64][]uint64)
	return h.nextStream, nil
}

// DestroyStream forgets a stream; its free list moves to the pool's stream 0 list, like CUDA's
// pool, which keeps memory freed on a destroyed stream.
func (h *Backend) DestroyStream(s backend.Stream) error {
	if !h.liveStreams[s] {
		return fmt.Errorf("host backend: destroy stream %d: no such stream", s)
	}
	delete(h.liveStreams, s)
	orphans := h.asyncFree[0]
	if orphans == nil {
		orphans = make(map[uint64][]uint64)
		h.asyncFree[0] = orphans
	}
	for size, addrs := range h.asyncFree[s] {
		orphans[size] = append(orphans[size], addrs...)
	}
	delete(h.asyncFree, s)
	return nil
}

// AllocAsync takes a mapping of the page-rounded size freed on stream s, else maps a new one.
func (h *Backend) AllocAsync(size uint64, s backend.Stream) (uint64, error) {
	free, ok := h.asyncFree[s]
	if !ok {
		return 0, fmt.Errorf("host backend: alloc on stream %d: no such stream", s)
	}
	length := h.roundUp(size)
	if addrs := free[length]; len(addrs) > 0 {
		addr := addrs[len(addrs)-1]
		free[length] = addrs[:len(addrs)-1]
		return addr, nil
	}
	addr, length, err := h.mmap(size)
	if errors.Is(err, pool.ErrOutOfMemory) {
		// Like CUDA's pool, give the memory no block uses back before failing.
		if terr := h.trimAsync(); terr != nil {
			return 0, terr
		}
		addr, length, err = h.mmap(size)
	}
	if err != nil {
		return 0, err
	}
	h.asyncSize[addr] = length
	h.asyncHeld += length
	h.asyncHigh = max(h.asyncHigh, h.asyncHeld)
	return addr, nil
}

// FreeAsync puts the mapping on stream s's free list; it stays mapped.
func (h *Backend) FreeAsync(addr uint64, s backend.Stream) error {
	length, ok := h.asyncSize[addr]
	if !ok {
		return fmt.Errorf("host backend: free async %#x: %w", addr, pool.ErrUnknownAddress)
	}
	free, ok := h.asyncFree[s]
	if !ok {
		return fmt.Errorf("host backend: free on stream %d: no such stream", s)
	}
	free[length] = append(free[length], addr)
	return nil
}

// Synchronize does nothing: host work is done when a call returns.
func (h *Backend) Synchronize() error { return nil }

// AsyncPoolReserved returns the bytes mapped by AllocAsync and not yet given back, and their maximum.
func (h *Backend) AsyncPoolReserved() (current, high uint64, err error) {
	return h.asyncHeld, h.asyncHigh, nil
}

// ResetAsyncPool unmaps every mapping on the streams' free lists and resets the high-water mark.
func (h *Backend) ResetAsyncPool() error {
	if err := h.trimAsync(); err != nil {
		return err
	}
	h.asyncHigh = h.asyncHeld
	return nil
}

// trimAsync unmaps every mapping on the streams' free lists.
func (h *Backend) trimAsync() error {
	for _, free := range h.asyncFree {
		for size, addrs := range free {
			for _, addr := range addrs {
				if err := h.munmap(addr); err != nil {
					return err
				}
				delete(h.asyncSize, addr)
				h.asyncHeld -= h.roundUp(size)
			}
			delete(free, size)
		}
	}
	return nil
}

// MemGetInfo returns capacity minus the bytes mapped now, and the capacity.
func (h *Backend) MemGetInfo() (free, total uint64, err error) {
	return h.capacity - h.mapped, h.capacity, nil
}

// Bytes returns the host memory of the block [addr, addr+size), which must lie inside one mapping
// (Reserve, AllocAsync) or inside mapped pages of one address reservation (Map), so that a caller
// can read or write it directly; it stays valid until that memory is unmapped.
func (h *Backend) Bytes(addr, size uint64) ([]byte, error) {
	m, ok := h.maps.Containing(addr, size)
	if !ok {
		if b, ok := h.mappedBlock(addr, size); ok {
			return b, nil
		}
		return nil, fmt.Errorf("host backend: [%#x, %#x) is not inside a mapping", addr, addr+size)
	}
	off := addr - m.Addr
	return m.Data[off : off+size], nil
}

// Touch writes pattern to every byte of the block and reads a sample back.
func (h *Backend) Touch(addr, size uint64, pattern byte) error {
	b, err := h.Bytes(addr, size)
	if err != nil {
		return err
	}
	fill(b, pattern)
	return h.Check(addr, size, pattern)
}

// fill sets every byte of b to v, doubling the filled prefix with copy.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// Check compares a sample of the block with pattern.
func (h *Backend) Check(addr, size uint64, pattern byte) error {
	b, err := h.Bytes(addr, size)
	if err != nil {
		return err
	}
	for _, r := range backend.SampleRanges(size) {
		for i, v := range b[r[0] : r[0]+r[1]] {
			if v != pattern {
				return fmt.Errorf("byte %d of block %#x (%d bytes) is %#02x, want %#02x", r[0]+uint64(i), addr, size, v, pattern)
			}
		}
	}
	return nil
}

// Close unmaps everything still mapped, address reservations included.
func (h *Backend) Close() error {
	var addrs []uint64
	h.maps.Each(func(m addrset.Span) bool { addrs = append(addrs, m.Addr); return true })
	for _, a := range addrs {
		if err := h.munmap(a); err != nil {
			return err
		}
	}
	return h.closeAddressSpace()
}
