// Package poolactivity is the schema of what the pool of `record --pool` did inside the recorded
// program: the counters the shim keeps (intercept/shim/pool.h), which record reads from the
// shim's control log, prints, and stores in the trace's metadata (key allocscope.pool, which
// package trace carries as opaque JSON in trace.Info.Pool), and which analyze --compare shows.
// Its fields follow the shim: they are no part of the trace format's promise.
package poolactivity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Activity is what the pool of `record --pool` did inside the recorded program, summed over its
// processes and devices. The calls it served are the events with trace.Event.Pool set.
type Activity struct {
	Syncs             int64  `json:"syncs"`               // device synchronizations the pool made itself
	SyncNs            int64  `json:"sync_ns"`             // time inside them, ns
	Reservations      int64  `json:"reservations"`        // regions reserved from CUDA: the plan and every growth
	Fallbacks         int64  `json:"fallbacks"`           // requests that made the pool grow
	PassedThrough     int64  `json:"passed_through"`      // requests of the kinds it serves that went to CUDA
	Events            int64  `json:"events"`              // CUDA events recorded at stream-ordered frees
	StreamWaits       int64  `json:"stream_waits"`        // streams made to wait for another stream's free
	HostWaits         int64  `json:"host_waits"`          // host waits for another stream's free
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"` // the most bytes one pool held reserved
	IPCExports        int64  `json:"ipc_exports"`         // pool blocks exported with cudaIpcGetMemHandle
	// Barriers is how many of Syncs were barriers on the legacy stream instead of device
	// synchronizations: the host did not wait. Once the program made non-blocking streams, such a
	// barrier is a join: the legacy stream first waits for an event on each of them, and each of
	// them then waits for the barrier.
	Barriers int64 `json:"barriers,omitempty"`
	// StreamsApart counts the non-blocking streams the program made; with them, an ordering is a
	// join barrier, or a device synchronization where a join cannot be made (docs/record-pool.md).
	StreamsApart int64 `json:"streams_apart,omitempty"`
	// PassedBy splits PassedThrough by why each request went to CUDA, by PassReasons' names; a
	// reason with none is left out (nil: none passed, or a recorder that did not tell).
	PassedBy map[string]int64 `json:"passed_by,omitempty"`
	// PoolsNotMade counts the pools (one per process and device) that could not be made: their
	// requests went to CUDA (PassedBy["no_pool"]).
	PoolsNotMade int64 `json:"pools_not_made,omitempty"`
	// FirstNotMadeError is the CUDA error of the first failed reservation of a pool's plan (0: none
	// known, e.g. the driver lacked functions the pool needs).
	FirstNotMadeError int64 `json:"first_not_made_error,omitempty"`
	// PeakReservedSumBytes is the sum over every process and device of its pool's peak reserved
	// bytes: an upper bound of the peak of all pools' reserved bytes together (the pools need not
	// peak at once). PeakReservedBytes is the largest single pool's peak.
	PeakReservedSumBytes uint64 `json:"peak_reserved_sum_bytes,omitempty"`
	// CapturedFrees counts pool blocks freed on a capturing stream: kept allocated, since the graph
	// may use them at every launch.
	CapturedFrees int64 `json:"captured_frees,omitempty"`
	// LateFreesKept counts a signal handler's frees of pool blocks that could not be queued while
	// its thread was inside the pool: those blocks stay allocated.
	LateFreesKept int64 `json:"late_frees_kept,omitempty"`
	// Retired counts pools given up with their contexts (a device reset, a destroyed context).
	Retired int64 `json:"retired,omitempty"`
	// IdleReleases counts the regions the pool gave back to CUDA because nothing in them was in use,
	// when a growth or a call that went to CUDA found the device out of memory; IdleReleasedBytes
	// are their bytes.
	IdleReleases      int64  `json:"idle_releases,omitempty"`
	IdleReleasedBytes uint64 `json:"idle_released_bytes,omitempty"`
}

// PassReasons names the reasons a request of the kinds record --pool serves went to CUDA, the keys
// of Activity.PassedBy: the pool could not be made, the thread had no context, a graph was being
// captured, a signal handler's call inside the pool, the pool was full and could not grow, its
// context was reset or destroyed, pool.json excluded the request, anything else.
var PassReasons = []string{"no_pool", "no_context", "capture", "signal", "full", "retired", "excluded", "other"}

// PeakReservedTotal is the pools' peak reserved bytes summed over processes and devices
// (PeakReservedSumBytes), or PeakReservedBytes for a recorder that did not keep the sum.
func (a *Activity) PeakReservedTotal() uint64 {
	return max(a.PeakReservedSumBytes, a.PeakReservedBytes)
}

// JSON encodes a as the trace metadata stores it (trace.Info.Pool); nil for nil.
func (a *Activity) JSON() json.RawMessage {
	if a == nil {
		return nil
	}
	b, _ := json.Marshal(a) // numbers and a map of numbers always marshal
	return b
}

// Decode reads the JSON of trace.Info.Pool and checks it: no unknown field, no negative count,
// no more barriers than synchronizations, PassedBy keyed by PassReasons. Empty raw is nil (a
// trace recorded without --pool).
func Decode(raw json.RawMessage) (*Activity, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var a Activity
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, err
	}
	if a.Syncs < 0 || a.SyncNs < 0 || a.Reservations < 0 || a.Fallbacks < 0 || a.PassedThrough < 0 ||
		a.Events < 0 || a.StreamWaits < 0 || a.HostWaits < 0 || a.IPCExports < 0 || a.CapturedFrees < 0 ||
		a.LateFreesKept < 0 || a.Retired < 0 || a.Barriers < 0 || a.Barriers > a.Syncs ||
		a.StreamsApart < 0 || a.IdleReleases < 0 || a.PoolsNotMade < 0 || a.FirstNotMadeError < 0 {
		return nil, fmt.Errorf("negative count, or more barriers than syncs, in %s", raw)
	}
	for _, reason := range slices.Sorted(maps.Keys(a.PassedBy)) {
		if n := a.PassedBy[reason]; !slices.Contains(PassReasons, reason) || n < 0 {
			return nil, fmt.Errorf("passed_by: %q %d is not a reason and count", reason, n)
		}
	}
	return &a, nil
}
