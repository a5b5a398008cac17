// Package whatif replays a trace's requests through allocator policies of package pool over a
// simulated address space, and through the recommended size classes to count their slots.
package whatif

import (
	"github.com/allocscope/allocscope/internal/poolmeter"
	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/pool"
)

// Durations estimates how long the native calls behind upstream operations take, in ns.
type Durations interface {
	Alloc(size uint64) float64
	Free(size uint64) float64
}

// mapGranule is the unit the CUDA backend maps memory in: the device's allocation granularity
// (2 MiB on the H200), each granule its own cuMemCreate + cuMemMap + cuMemSetAccess (and
// cuMemUnmap + cuMemRelease to unmap it). A Map or Unmap is charged as that many calls of a
// granule's size; a granule moved (Remap) as one map (it skips the cuMemCreate and cuMemRelease, so
// this errs high).
const mapGranule = 2 << 20

// upstream is a policy's simulated memory: a poolsim.Upstream holding at most capacity bytes (0 =
// unbounded), metered by poolmeter.Meter, which adds up the estimated duration of each call.
type upstream struct {
	meter       *poolmeter.Meter
	up          pool.Upstream // the metered upstream the policy uses
	predictedNs float64
}

// newUpstream returns the simulated memory of a policy. The stream-ordered model maps 32 MiB steps,
// as CUDA's pools do inside cudaMallocAsync; how the driver maps a step is not known, so a step is
// charged as one native allocation (or free) of its size, and counted as one page operation.
func newUpstream(capacity uint64, est Durations, policy pool.Policy) *upstream {
	// Each policy runs on one goroutine (forEachBatch): neither it nor its address space locks.
	u := &upstream{}
	opts := poolmeter.Options{PageBytes: mapGranule}
	if policy == pool.PolicyStreamOrdered {
		opts.PageBytes = pool.StreamOrderedStepBytes
	}
	if est != nil {
		opts.Cost = func(c poolmeter.Call, size, n uint64) {
			if c == poolmeter.CallRelease {
				u.predictedNs += float64(n) * est.Free(size)
			} else {
				u.predictedNs += float64(n) * est.Alloc(size)
			}
		}
	}
	u.meter, u.up = poolmeter.New(poolsim.NewSingleGoroutineUpstream(capacity, pool.DefaultAlignment), opts)
	return u
}
