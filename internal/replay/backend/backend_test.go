package backend

import (
	"errors"
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	if Default() != "host" {
		t.Errorf("Default with no cuda registered = %q, want host", Default())
	}
	wantErr := errors.New("fake")
	Register("fake", func(o Options) (Backend, error) { return nil, wantErr })
	if !slices.Contains(Names(), "fake") {
		t.Errorf("Names = %v, want fake in it", Names())
	}
	if _, err := Open("fake", Options{}); err != wantErr {
		t.Errorf("Open(fake): err = %v, want the maker's", err)
	}
	if _, err := Open("cuda", Options{}); err == nil || err.Error() != "backend cuda: this binary was built without the cuda build tag (build it with `make replay-cuda`)" {
		t.Errorf("Open(cuda) unregistered: err = %v", err)
	}
	if _, err := Open("nope", Options{}); err == nil || err.Error() != "backend nope: unknown backend (known: cuda, fake)" {
		t.Errorf("Open(nope): err = %v", err)
	}
	if err := Unavailable("fake"); err != nil {
		t.Errorf("Unavailable(fake) = %v, want nil: it is registered", err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("a second Register of fake did not panic")
		}
	}()
	Register("fake", func(o Options) (Backend, error) { return nil, nil })
}

func TestSampleRanges(t *testing.T) {
	for _, c := range []struct {
		size uint64
		want [3][2]uint64
	}{
		{10, [3][2]uint64{{0, 10}, {0, 10}, {0, 10}}},
		{1000, [3][2]uint64{{0, 256}, {372, 256}, {744, 256}}},
	} {
		if got := SampleRanges(c.size); got != c.want {
			t.Errorf("SampleRanges(%d) = %v, want %v", c.size, got, c.want)
		}
	}
}
