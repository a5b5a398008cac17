package analysis_test

import (
	"fmt"
	"io"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/trace"
)

// memory is a Source over events held in memory; trace.Open gives one over a file.
type memory struct {
	events []trace.Event
	done   bool
}

func (m *memory) Next() ([]trace.Event, error) {
	if m.done {
		return nil, io.EOF
	}
	m.done = true
	return m.events, nil
}

func Example() {
	events := []trace.Event{
		{Seq: 1, TimeNs: 1000, Op: trace.OpAlloc, Address: 0x1000, Size: 3 << 20, Function: "cudaMalloc"},
		{Seq: 2, TimeNs: 2000, Op: trace.OpAlloc, Address: 0x2000, Size: 1000, Function: "cudaMalloc"},
		{Seq: 3, TimeNs: 3000, Op: trace.OpFree, Address: 0x1000, Function: "cudaFree"},
	}
	in := analysis.Input{Name: "example", Open: func() (analysis.Source, error) {
		return &memory{events: events}, nil
	}}
	r, err := analysis.Analyze([]analysis.Input{in}, analysis.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := r.Combined
	fmt.Println("peak live bytes:", tr.Requests.PeakLiveBytes)
	fmt.Println("leaks:", tr.Anomalies.Leaks.Count)
	cfg := analysis.Config(r)
	fmt.Println("policy:", cfg.Policy, "fallbacks:", cfg.Prediction.Fallbacks)
	// Output:
	// peak live bytes: 3146728
	// leaks: 1
	// policy: sizeclass fallbacks: 0
}
