package whatif

import (
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/replay"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/trace"
)

// Every trace in testdata and the bundled one: the ops analyze's simulation serves (the layer its statistics choose,
// batch by batch on the workers of forEachBatch) are exactly the ops replay extracts, in the same
// order, with the same slots, streams and sync points.
func TestSimulationAndReplaySeeTheSameOps(t *testing.T) {
	paths := []string{filepath.Join("..", "..", "..", "cli", "analyze", "bundled", "pytorch-train.arrow")}
	for _, pattern := range []string{"*.arrow", "*/*.arrow", "*/*.pickle*", "*/*.csv"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "testdata", pattern))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	checked := 0
	for _, p := range paths {
		if !readable(p) {
			continue // the testdata of bad input
		}
		t.Run(filepath.Base(p), func(t *testing.T) {
			sim, simHandles := simulatedOps(t, p)
			r, err := trace.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			tr, err := replay.Extract(r)
			if err != nil {
				t.Fatal(err)
			}
			if want := foldSyncs(tr.Ops); !slices.Equal(sim, want) || !slices.Equal(simHandles, tr.Streams) {
				t.Fatalf("simulation %d ops, %d streams; replay %d ops, %d streams; first difference at %d",
					len(sim), len(simHandles), len(want), len(tr.Streams), firstDifference(sim, want))
			}
			if len(sim) == 0 {
				t.Fatalf("no ops")
			}
		})
		checked++
	}
	if checked < 15 {
		t.Errorf("%d traces checked, want the 15 or more readable ones of testdata", checked)
	}
}

// readable reports whether the trace at path reads to the end without an error.
func readable(path string) bool {
	r, err := trace.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// simulatedOps returns the ops of the trace at path as analyze's simulation gets them, sync-only
// ops folded into the op before them (where a batch boundary put them), and the stream handles.
func simulatedOps(t *testing.T, path string) ([]requests.Op, []uint64) {
	t.Helper()
	col := stats.NewCollector(nil)
	r, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := r.Next()
		col.Add(b)
		if err != nil {
			break
		}
	}
	r.Close()
	layer := col.Finish(0).RequestLayer
	if r, err = trace.Open(path); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log, st, err := requests.Decode(r, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if st.Layer != layer {
		t.Fatalf("the request log has the %s layer, the statistics chose %s", st.Layer, layer)
	}
	var ops []requests.Op
	var handles []uint64
	err = forEachBatch(log, 1, nil, func(_ int, b opBatch) {
		ops = append(ops, b.ops...)
		handles = b.handles
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return foldSyncs(ops), slices.Clone(handles)
}

// foldSyncs moves the sync point of each sync-only op onto the op before it, dropping the op (a
// sync-only op at the start, before any request, synchronizes nothing).
func foldSyncs(ops []requests.Op) []requests.Op {
	var out []requests.Op
	for _, o := range ops {
		if o.IsAlloc() || o.IsFree() {
			out = append(out, o)
			continue
		}
		if n := len(out); n > 0 && !out[n-1].Syncs() {
			out[n-1] = requests.NewOp(out[n-1].Size, out[n-1].Slot, out[n-1].StreamIndex(), true)
		}
	}
	return out
}

func firstDifference(a, b []requests.Op) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
