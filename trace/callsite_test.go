package trace

import "testing"

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
