package requests

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// eventsOnly hides the NextColumns of a source: the extraction reads it event by event.
type eventsOnly struct{ Source }

// allFieldsVary gives the fields of events that mixedEvents leaves constant values that vary, so
// that a field the column form left out of the rule would show.
func allFieldsVary(events []trace.Event) []trace.Event {
	for i := range events {
		e := &events[i]
		e.TID, e.Handle, e.Callsite, e.Pool = uint32(i%5), uint64(i%7), 0x400000+uint64(i%13)*16, i%3 == 0
	}
	return events
}

// Extracting a trace file by column gives exactly the Trace (ops, slots, streams, counts, warnings)
// that extracting it event by event gives, on traces of many batches with and without framework
// events.
func TestColumnsExtractSame(t *testing.T) {
	for _, fw := range []int{0, 7} {
		path := writeEvents(t, allFieldsVary(mixedEvents(50_000, fw)), 999)
		byColumn, byEvent := extractBoth(t, path)
		if len(byColumn.Ops) < 3000 || !reflect.DeepEqual(byColumn, byEvent) {
			t.Errorf("framework 1 in %d: by column %d ops, stats %+v; by event %d ops, stats %+v", fw,
				len(byColumn.Ops), byColumn.Stats, len(byEvent.Ops), byEvent.Stats)
		}
	}
}

// extractBoth extracts the trace at path by column and by event.
func extractBoth(t *testing.T, path string) (byColumn, byEvent *Trace) {
	t.Helper()
	for _, columns := range []bool{true, false} {
		r, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var src Source = r
		if !columns {
			src = eventsOnly{r}
		}
		tr, err := Extract(src)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if columns {
			byColumn = tr
		} else {
			byEvent = tr
		}
	}
	return byColumn, byEvent
}

// The same on every Arrow trace of testdata.
func TestColumnsExtractSameOnTestdata(t *testing.T) {
	var paths []string
	filepath.WalkDir("../../testdata", func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".arrow") {
			paths = append(paths, path)
		}
		return err
	})
	if len(paths) < 10 {
		t.Fatalf("%d Arrow traces in testdata", len(paths))
	}
	for _, path := range paths {
		byColumn, byEvent := extractBoth(t, path)
		if byColumn.Stats.Events == 0 || !reflect.DeepEqual(byColumn, byEvent) {
			t.Errorf("%s: by column %d ops, stats %+v; by event %d ops, stats %+v", path,
				len(byColumn.Ops), byColumn.Stats, len(byEvent.Ops), byEvent.Stats)
		}
	}
}

// AppendBatch makes, batch by batch, the ops that Append makes of the same events, for both
// layers.
func TestAppendBatchSameOps(t *testing.T) {
	events := allFieldsVary(mixedEvents(30_000, 5))
	r, err := trace.Open(writeEvents(t, events, 1000))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, layer := range []Layer{Framework, Device} {
		byColumn, byEvent := NewExtractor(layer), NewExtractor(layer)
		for i := 0; ; i++ {
			b, err := NextBatch(r)
			if err == io.EOF {
				break
			}
			if err != nil || b.cols == nil || b.Len() != 1000 {
				t.Fatalf("batch %d: %d events, by column %v, error %v", i, b.Len(), b.cols != nil, err)
			}
			batch := events[i*1000 : (i+1)*1000]
			got, want := byColumn.AppendBatch(b, nil), byEvent.Append(batch, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("%s batch %d: by column %d ops; by event %d ops", layer, i, len(got), len(want))
			}
		}
		if byColumn.Stats() != byEvent.Stats() || !slices.Equal(byColumn.Handles(), byEvent.Handles()) {
			t.Errorf("%s: by column %+v, by event %+v", layer, byColumn.Stats(), byEvent.Stats())
		}
		r.Close()
		if r, err = trace.Open(writeEvents(t, events, 1000)); err != nil {
			t.Fatal(err)
		}
	}
}
