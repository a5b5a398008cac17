package analyze

import (
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/allocscope/allocscope/trace"
)

// TestBundledTrace checks the embedded trace reads back whole: the counts in testdata/h200/counts.jsonl.
func TestBundledTrace(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	r, err := trace.OpenBytes(BundledTraceName, BundledTrace, trace.WithReadAllocator(alloc))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	counts := map[string]int{}
	var events int
	var sizeSum uint64
	for {
		batch, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			counts[batch[i].Function+":"+batch[i].Op.String()]++
			sizeSum += batch[i].Size
		}
		events += len(batch)
	}
	want := map[string]int{"cudaMalloc:alloc": 891, "cudaFree:free": 888, "cuMemAlloc_v2:alloc": 6, "cuMemFree_v2:free": 2}
	if events != 1787 || sizeSum != 1538915968 {
		t.Errorf("events, size sum = %d, %d; want 1787, 1538915968", events, sizeSum)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if info := r.Info(); info.Source != "allocscope" || len(info.GPUNames) != 1 || info.GPUNames[0] != "NVIDIA H200" || info.DriverVersion != "580.159.04" {
		t.Errorf("info = %+v", info)
	}
}
