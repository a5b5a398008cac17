package analysis

import (
	"bytes"
	"testing"
)

func TestSmoke(t *testing.T) {
	b := &builder{}
	b.alloc(0x1000, 1000, 5000).alloc(0x2000, 3<<20, 20000).free(0x1000, 2000).alloc(0x3000, 600, 4000)
	b.free(0x2000, 90000).free(0x3000, 2000)
	r, err := Analyze([]Input{fakeInput("smoke", b.events)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	buf.Reset()
	WriteJSON(&buf, r)
	t.Log(buf.String())
}
