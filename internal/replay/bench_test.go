package replay

import (
	"math/rand/v2"
	"testing"

	"github.com/allocscope/allocscope/pool"
)

// noopBackend is a Backend whose calls do nothing but hand out fresh addresses: replaying on it
// measures the engine's own cost per request.
type noopBackend struct {
	simBackend
	next uint64
}

func (n *noopBackend) AllocAsync(size uint64, _ Stream) (uint64, error) {
	n.next += 1 << 20
	return n.next, nil
}
func (n *noopBackend) FreeAsync(uint64, Stream) error             { return nil }
func (n *noopBackend) AsyncPoolReserved() (uint64, uint64, error) { return 0, 0, nil }
func (n *noopBackend) ResetAsyncPool() error                      { return nil }
func (n *noopBackend) MemGetInfo() (uint64, uint64, error)        { return 1 << 40, 1 << 40, nil }

// benchEngine replays a 10,000-request random trace in async mode on noopBackend; ns/op is the
// engine's overhead per request (two clock readings, the latency histogram, the address table).
func benchEngine(b *testing.B, opt Options) {
	tr := randomTrace(rand.New(rand.NewPCG(3, 7)), 10000).extract(b)
	nb := &noopBackend{simBackend: *newSimBackend(&vclock{}, 1<<40)}
	opt.Modes = []Mode{ModeAsync}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := Run(tr, nb, pool.Config{}, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tr.Ops)), "ns/request")
}

func BenchmarkEngineOverhead(b *testing.B)       { benchEngine(b, Options{}) }
func BenchmarkEngineOverheadVerify(b *testing.B) { benchEngine(b, Options{Verify: true}) }
