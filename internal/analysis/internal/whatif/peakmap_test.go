package whatif

import (
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/allocscope/allocscope/internal/poolsim"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// chunks serves events in batches of n.
type chunks struct {
	events []trace.Event
	n, pos int
}

func (c *chunks) Next() ([]trace.Event, error) {
	if c.pos >= len(c.events) {
		return nil, io.EOF
	}
	end := min(c.pos+c.n, len(c.events))
	b := c.events[c.pos:end]
	c.pos = end
	return b, nil
}

// waveTrace is n native requests whose live blocks rise to a peak at the middle and fall, with
// sizes from 512 B to 24 MiB; each allocation's callsite is its size, so that a live block's site
// says which request it is.
func waveTrace(n int) []trace.Event {
	rng := rand.New(rand.NewPCG(7, 11))
	var live []uint64
	var events []trace.Event
	next := uint64(0x10000)
	for i := range n {
		target := 200 - abs(i-n/2)*200/(n/2)
		e := trace.Event{Seq: uint64(i + 1), PID: 3, Stream: 0}
		if len(live) > target || (len(live) > 0 && rng.IntN(3) == 0) {
			k := rng.IntN(len(live))
			e.Op, e.Function, e.Address = trace.OpFree, "cudaFree", live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			size := []uint64{512, 3000, 70000, 1 << 20, 3 << 20, 24 << 20}[rng.IntN(6)] + uint64(rng.IntN(4096))
			e.Op, e.Function, e.Address, e.Size, e.Callsite = trace.OpAlloc, "cudaMalloc", next, size, size
			live = append(live, next)
			next += 1 << 30
		}
		events = append(events, e)
	}
	return events
}

func abs(x int) int { return max(x, -x) }

// mappedPolicies are the two allocators the report maps: a size-class pool whose plan is too
// small (its classes and arena grow) and PyTorch's defaults.
func mappedPolicies() []Policy {
	sc := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicySizeClass, SizeClass: &pool.SizeClassConfig{
		Classes:        []pool.Class{{Size: 512, Slots: 8}, {Size: 4096, Slots: 8}, {Size: 73728, Slots: 4}},
		LargeThreshold: 73728, ArenaBytes: 32 << 20, GrowSlots: 4}}
	torch := pool.Config{Version: pool.ConfigVersion, Policy: pool.PolicyPyTorch}
	return []Policy{{Name: "recommended", Config: sc, Map: true}, {Name: "pytorch", Config: torch, Map: true}}
}

// directMap replays events through a fresh allocator of cfg, an op at a time, and returns its
// layout once it has served calls calls.
func directMap(t *testing.T, events []trace.Event, cfg pool.Config, calls uint64) []pool.Region {
	t.Helper()
	a, err := pool.New(cfg, poolsim.NewUpstream(0, pool.DefaultAlignment))
	if err != nil {
		t.Fatal(err)
	}
	x, f := requests.NewExtractor(requests.Device), requests.NewFeeder(a)
	ops := x.Append(events, nil)
	for i := 0; i < len(ops); i++ {
		if s := a.Stats(); s.Allocs+s.Frees+s.Failures == calls {
			break
		}
		f.Feed(ops[i:i+1], x.Handles())
	}
	return a.(pool.Layouter).Layout()
}

// A policy's map is its layout at the moment of its PeakStats: what a replay stopped there lists,
// with the counters of PeakStats and the sites of the live blocks, also when the trace spans
// several chunks of the log (300,000 events: the shadow follows the peak chunk by chunk).
func TestPeakMap(t *testing.T) {
	for _, n := range []int{6000, 300_000} {
		events := waveTrace(n)
		outs, err := Run(decoded(t, &chunks{events: events, n: 100}), mappedPolicies(), 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			checkPeakMap(t, events, o)
		}
	}
}

// checkPeakMap checks o's map against a replay of events stopped at its peak.
func checkPeakMap(t *testing.T, events []trace.Event, o Outcome) {
	t.Helper()
	m := o.Map
	if o.Err != nil || m == nil || m.Stats != o.Peak || m.Calls != calls(o.Peak) ||
		o.Stats.Fallbacks == 0 && o.Policy.Name == "recommended" {
		t.Fatalf("%s: err %v, map %+v, peak %+v, fallbacks %d", o.Policy.Name, o.Err, m, o.Peak, o.Stats.Fallbacks)
	}
	if want := directMap(t, events, o.Policy.Config, m.Calls); !reflect.DeepEqual(m.Regions, want) {
		t.Errorf("%s: map of %d regions, a replay stopped at call %d has %d", o.Policy.Name, len(m.Regions), m.Calls, len(want))
	}
	var reserved, free, live uint64
	for _, r := range m.Regions {
		reserved += r.Size
		for _, b := range r.Blocks {
			if !b.Live {
				free += b.Size
				continue
			}
			live++
			if s, ok := m.Sites[r.Base+b.Offset]; !ok || s.Callsite != b.Requested || s.PID != 3 {
				t.Errorf("%s: live block %#x of %d bytes: site %+v", o.Policy.Name, r.Base+b.Offset, b.Requested, s)
			}
		}
	}
	if reserved != o.Peak.ReservedBytes || free != o.Peak.ExternalFragmentation() || live != o.Peak.LiveBlocks() ||
		len(m.Sites) != int(live) {
		t.Errorf("%s: map reserved %d free %d live %d (%d sites); peak %+v", o.Policy.Name, reserved, free, live,
			len(m.Sites), o.Peak)
	}
}
