package analysis

import (
	"bytes"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/trace"
)

// A bundled H200 trace has callsite addresses and no module map: the report says so in one line,
// with what to do, in the JSON, in the text report under the callsites and in the HTML report
// under the headline.
func TestCallsiteNoteWithoutModules(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "h200", "a_static.arrow")
	r, err := Analyze([]Input{{Name: "a_static", Open: func() (Source, error) { return trace.Open(path) }}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "2 callsites are bare return addresses: the trace has no module map (an older record wrote it); " +
		"record the program again with a current record, which writes one, to name them"
	if got := r.Combined.CallsiteNote; got != want {
		t.Fatalf("callsite note %q, want %q", got, want)
	}
	text := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }))
	wrapped := "\n  2 callsites are bare return addresses: the trace has no module map (an older record wrote it);\n" +
		"  record the program again with a current record, which writes one, to name them\n\nSIZE CLASSES"
	if !strings.Contains(text, wrapped) {
		t.Errorf("the text report lacks the note after the callsites:\n%s", text)
	}
	page := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) }))
	if !strings.Contains(page, `<p class="note">`+want+`</p>`) {
		t.Error("the HTML report lacks the note")
	}
	js := string(output(t, r, func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) }))
	if !strings.Contains(js, `"callsite_note": "`+want+`"`) {
		t.Error("the JSON report lacks callsite_note")
	}
}

// A PyTorch snapshot names its callsites: no note, and the report keeps every frame of a stack
// behind each name it uses, as the snapshot recorded them.
func TestCallsiteStacksOfSnapshot(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "torch", "train.caching.snapshot.pickle.gz")
	r, err := Analyze([]Input{{Name: "train", Open: func() (Source, error) { return trace.Open(path) }}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := r.Combined
	if tr.CallsiteNote != "" {
		t.Errorf("callsite note %q on a snapshot, want none", tr.CallsiteNote)
	}
	stacks := snapshotStacks(t, path)
	if len(tr.TopCallsites) == 0 {
		t.Fatal("no callsites")
	}
	for _, c := range append(tr.TopCallsites, tr.PeakCallsites...) {
		got, want := tr.Stacks[c.Callsite], stacks[c.Callsite]
		if !slices.ContainsFunc(want, func(s []string) bool { return slices.Equal(s, got) }) || len(got) < 2 {
			t.Errorf("stack of %s: %q, want one of the snapshot's %d with that name", c.Callsite, got, len(want))
		}
	}
}

// snapshotStacks reads the distinct stacks of every callsite name of a snapshot, their frames
// written as the report writes them.
func snapshotStacks(t *testing.T, path string) map[string][][]string {
	t.Helper()
	rd, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	stacks := map[string][][]string{}
	for {
		b, err := rd.Next()
		for _, e := range b {
			c, ok := rd.Callsite(e.PID, e.Callsite)
			if !ok {
				continue
			}
			var lines []string
			for _, f := range c.Frames {
				line := f.Function
				if f.File != "" {
					line += " (" + f.File
					if f.Line > 0 {
						line += ":" + strconv.FormatInt(f.Line, 10)
					}
					line += ")"
				}
				lines = append(lines, line)
			}
			if !slices.ContainsFunc(stacks[c.Label], func(s []string) bool { return slices.Equal(s, lines) }) {
				stacks[c.Label] = append(stacks[c.Label], lines)
			}
		}
		if err != nil {
			return stacks
		}
	}
}
