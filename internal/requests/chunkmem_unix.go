//go:build unix

package requests

import (
	"syscall"
	"unsafe"
)

// chunkMemory returns room for n ops, and with sites for their site indexes, outside the Go heap
// (an anonymous mapping, populated where the system can), so that a log's chunks, however many, do
// not raise the garbage collector's heap target: the heap may grow to twice what is live before a
// collection, and the log is most of what is live. mem is what freeChunkMemory releases; nil when
// the mapping failed and the Go heap holds the chunk instead. Without sites, sites is nil: no
// memory is held for them.
func chunkMemory(n int, withSites bool) (ops []Op, sites []uint32, mem []byte) {
	size := n * int(opBytes)
	if withSites {
		size += n * int(siteIndexBytes)
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|populate)
	if err != nil {
		return heapChunk(n, withSites)
	}
	ops = unsafe.Slice((*Op)(unsafe.Pointer(&mem[0])), n)[:0]
	if withSites {
		sites = unsafe.Slice((*uint32)(unsafe.Pointer(&mem[n*int(opBytes)])), n)[:0]
	}
	return ops, sites, mem
}

// freeChunkMemory releases what chunkMemory mapped.
func freeChunkMemory(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
