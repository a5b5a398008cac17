package analysis

import (
	"testing"

	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/trace"
)

// analyze's statistics and the request stream choose the same layer (requests.LayerChoice), also
// when the framework's only allocations are above requests.MaxSize and are dropped as corrupt: an
// allocation request of the framework layer makes it the requests' layer whatever its size.
func TestRequestLayerAgrees(t *testing.T) {
	native := func() *builder {
		b := &builder{}
		b.alloc(0x10000000, 2<<20, 1000)
		b.alloc(0x20000000, 4<<20, 1000)
		b.free(0x10000000, 1000)
		return b
	}
	framework := func(b *builder, size uint64) *builder {
		b.add(trace.Event{Op: trace.OpAlloc, Layer: trace.LayerFramework, Function: trace.FuncTorchAlloc,
			Address: 0x20000000, Size: size, Stream: 7})
		b.add(trace.Event{Op: trace.OpFree, Layer: trace.LayerFramework, Function: "torch.free_completed",
			Address: 0x20000000, Stream: 7})
		return b
	}
	for _, c := range []struct {
		name   string
		events []trace.Event
		want   requests.Layer
	}{
		{"native only", native().events, requests.Device},
		{"framework allocations above MaxSize only", framework(native(), requests.MaxSize+1).events, requests.Framework},
		{"framework allocations", framework(native(), 4096).events, requests.Framework},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream, err := requests.Extract(&sliceSource{events: c.events})
			if err != nil {
				t.Fatal(err)
			}
			tr := analyzeEvents(t, c.events)
			if stream.Stats.Layer != c.want || tr.RequestLayer != string(stream.Stats.Layer) {
				t.Errorf("request stream's layer %s, analyze's %s; want %s for both",
					stream.Stats.Layer, tr.RequestLayer, c.want)
			}
		})
	}
}
