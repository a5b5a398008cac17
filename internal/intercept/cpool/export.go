//go:build cgo

package cpool

// The calls of the C pool's upstream back into Go (run.c's cpool_reserve and cpool_release): a
// //export file's preamble may only declare.

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
)

// cpoolUpstreamReserve is the C pool's reserve: the Go Pool's Upstream.Reserve, serving op (-1
// outside a run). It returns 0 and the region's address, or the code of the error.
//
//export cpoolUpstreamReserve
func cpoolUpstreamReserve(h C.uintptr_t, op C.int64_t, size C.uint64_t, addr *C.uint64_t) C.int {
	p := cgo.Handle(h).Value().(*Pool)
	a, err := p.up.Reserve(uint64(size))
	if err != nil {
		return p.upstreamFailed(int64(op), fmt.Errorf("reserve %d bytes from upstream: %w", uint64(size), err))
	}
	*addr = C.uint64_t(a)
	return 0
}

// cpoolUpstreamRelease is the C pool's release: the Go Pool's Upstream.Release.
//
//export cpoolUpstreamRelease
func cpoolUpstreamRelease(h C.uintptr_t, op C.int64_t, addr, size C.uint64_t) C.int {
	p := cgo.Handle(h).Value().(*Pool)
	if err := p.up.Release(uint64(addr), uint64(size)); err != nil {
		return p.upstreamFailed(int64(op), fmt.Errorf("release %d bytes at %#x to upstream: %w", uint64(size), uint64(addr), err))
	}
	return 0
}
