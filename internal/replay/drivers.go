package replay

import "github.com/allocscope/allocscope/pool"

// driver is one mode's way to allocate and free.
type driver interface {
	alloc(size uint64, stream uint32) (uint64, error)
	free(addr uint64, stream uint32) error
}

// allocatorDriver serves the raw and pool modes: a pool.Allocator over the counting Upstream. It
// passes the recorded stream handles, as analyze's simulation does.
type allocatorDriver struct {
	a       pool.Allocator
	handles []uint64
}

func (d allocatorDriver) alloc(size uint64, stream uint32) (uint64, error) {
	return d.a.Alloc(size, d.handles[stream])
}

func (d allocatorDriver) free(addr uint64, stream uint32) error {
	return d.a.Free(addr, d.handles[stream])
}

// asyncDriver serves the async mode: the backend's stream-ordered allocator, one stream per
// recorded stream.
type asyncDriver struct {
	b       Backend
	streams []Stream
}

func (d asyncDriver) alloc(size uint64, stream uint32) (uint64, error) {
	return d.b.AllocAsync(size, d.streams[stream])
}

func (d asyncDriver) free(addr uint64, stream uint32) error {
	return d.b.FreeAsync(addr, d.streams[stream])
}

// rawConfig is the configuration of the raw mode: every request straight to the Upstream.
func rawConfig(cfg pool.Config) pool.Config {
	return pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyRaw, Alignment: cfg.Alignment}
}
