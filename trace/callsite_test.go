package trace

import (
	"encoding/binary"
	"testing"
)

// A stack's label is the code that asked for memory: the user's Python frame, else torch's, else
// the first C++ frame past the allocator, templates and parameters dropped.
func TestCallsiteLabel(t *testing.T) {
	alloc := Frame{Function: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long)", File: "CUDACachingAllocator.cpp"}
	unwind := Frame{Function: "torch::unwind::unwind()", File: "??"}
	kernel := Frame{Function: "void at::native::gpu_reduce_kernel<float, float, 4>(at::TensorIterator&)", File: "Reduce.cu"}
	torchPy := Frame{Function: "forward", File: "/usr/lib/python3/site-packages/torch/nn/modules/conv.py", Line: 549}
	user := Frame{Function: "train_step", File: "/home/me/train.py", Line: 42}
	for _, tc := range []struct {
		frames []Frame
		want   string
	}{
		{[]Frame{unwind, alloc, kernel, torchPy, user}, "train_step (train.py:42)"},
		{[]Frame{unwind, alloc, kernel, torchPy}, "forward (conv.py:549)"},
		{[]Frame{unwind, alloc, kernel}, "at::native::gpu_reduce_kernel"},
		{[]Frame{unwind, alloc}, "?"},
	} {
		if got := callsiteLabel(tc.frames); got != tc.want {
			t.Errorf("label of %d frames = %q, want %q", len(tc.frames), got, tc.want)
		}
	}
}

// Symbol names as people know them: compiler clone suffixes dropped, C++ demangled without
// parameters or template arguments.
func TestCloneBase(t *testing.T) {
	for in, want := range map[string]string{
		"leak_small.isra.0": "leak_small",
		"f.constprop.3":     "f",
		"main":              "main",
		"_ZN3c104cuda20CUDACachingAllocator6mallocEPPvm":                  "c10::cuda::CUDACachingAllocator::malloc",
		"_ZN2at6native17gpu_reduce_kernelIffLi4EEEvRNS_14TensorIteratorE": "at::native::gpu_reduce_kernel",
	} {
		if got := cloneBase(in); got != want {
			t.Errorf("cloneBase(%q) = %q, want %q", in, got, want)
		}
	}
}

// gnuBuildIDNote finds the build ID among a file's notes: after another note, with 4-byte padding.
func TestGNUBuildIDNote(t *testing.T) {
	le := binary.LittleEndian
	note := func(name string, typ uint32, desc []byte) []byte {
		b := le.AppendUint32(nil, uint32(len(name)+1))
		b = le.AppendUint32(b, uint32(len(desc)))
		b = le.AppendUint32(b, typ)
		b = append(b, name...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	data := append(note("GNU", 1, []byte{0, 0, 0, 0, 2, 0, 0, 0}), note("GNU", 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})...)
	if got := gnuBuildIDNote(data, le, 4); got != "deadbeef01" {
		t.Errorf("build ID %q, want deadbeef01", got)
	}
	if got := gnuBuildIDNote(data[:len(data)-4], le, 4); got != "" {
		t.Errorf("cut note: %q, want none", got)
	}
	if got := gnuBuildIDNote(note("Go", 4, []byte("x")), le, 4); got != "" {
		t.Errorf("Go note: %q, want none", got)
	}
}

// FuzzGNUBuildIDNote: any note bytes give an ID or nothing, never a panic.
func FuzzGNUBuildIDNote(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 0, 0}, uint64(4))
	f.Add([]byte{}, uint64(8))
	f.Fuzz(func(t *testing.T, data []byte, align uint64) {
		gnuBuildIDNote(data, binary.LittleEndian, align%64)
	})
}
