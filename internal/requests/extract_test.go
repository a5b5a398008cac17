package requests

import (
	"math/rand/v2"

	"github.com/allocscope/allocscope/trace"
)

// mixedEvents returns n events drawn from seed that take every path of the rule: device, host,
// managed and virtual memory of both native layers, now and then a framework event (1 in
// frameworkEvery, none when it is 0), failed calls, allocations of 0 bytes and at live addresses,
// frees of address 0 and of blocks that are not live, OOM events, stream-ordered and synchronizing
// functions, three processes on two devices with three streams.
func mixedEvents(n, frameworkEvery int) []trace.Event {
	r := rand.New(rand.NewPCG(uint64(n), uint64(frameworkEvery)))
	funcs := []string{"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cuMemAlloc_v2",
		"cuMemFree_v2", "cuMemCreate", "cuMemRelease", "cuMemMap", "cudaMallocHost", "cudaMallocManaged"}
	events := make([]trace.Event, n)
	for i := range events {
		e := &events[i]
		e.Seq, e.TimeNs, e.DurationNs = uint64(i), int64(i)*100, int64(r.IntN(3))*1000
		e.PID, e.TID, e.Device = uint32(100+r.IntN(3)), 7, int32(r.IntN(2))
		e.Op = []trace.Op{trace.OpAlloc, trace.OpFree}[r.IntN(2)]
		if r.IntN(20) == 0 {
			e.Op = trace.Op(r.IntN(11))
		}
		e.Memory = trace.Memory(max(0, r.IntN(12)-8))
		e.Layer = trace.Layer(r.IntN(2))
		e.Function = funcs[r.IntN(len(funcs))]
		if frameworkEvery > 0 && r.IntN(frameworkEvery) == 0 {
			e.Layer, e.Function = trace.LayerFramework, trace.FuncTorchAlloc
		}
		e.Size = uint64(r.IntN(4)) << (8 + r.IntN(20))
		e.Address = uint64(r.IntN(64)) << 20
		e.Stream = uint64(r.IntN(3))
		if r.IntN(50) == 0 {
			e.Result = 2
		}
		if r.IntN(1000) == 0 {
			e.Size = MaxSize + 1
		}
	}
	return events
}
