package trace

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// A PyTorch stack's demangled C++ frame of a compiler's clone keeps its whole name in the label:
// the clone notes go, not the name before them (it was cut to ".isra.0]").
func TestCallsiteLabelOfClones(t *testing.T) {
	for name, want := range map[string]string{
		"at::native::foo(at::Tensor const&) [clone .isra.0]":                             "at::native::foo",
		"void at::native::bar<float>(at::TensorIterator&) [clone .constprop.0]":          "at::native::bar",
		"c10::baz(unsigned long) [clone .part.0]":                                        "c10::baz",
		"at::qux(int) [clone .isra.0] [clone .cold]":                                     "at::qux",
		"std::vector<int, std::allocator<int> >::_M_realloc_insert(int&&) [clone .cold]": "std::vector::_M_realloc_insert",
	} {
		frames := []Frame{{Function: name, File: "x.cpp"}}
		if got := callsiteLabel(frames); got != want {
			t.Errorf("label of %q = %q, want %q", name, got, want)
		}
		if got := frames[0].Function; got != name {
			t.Errorf("the frame's function changed to %q", got)
		}
	}
	if got := cloneBase("at::foo(int) [clone .isra.0]"); got != "at::foo(int)" {
		t.Errorf("cloneBase of a demangled clone = %q, want at::foo(int)", got)
	}
}

// CallsiteProblem says why callsites have no name: a trace without modules, a module's file
// that is not on this machine or was rebuilt, an address in no module; nothing when all are named.
func TestCallsiteProblem(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	open := func(mods []Module) *Reader {
		t.Helper()
		r, err := Open(writeTrace(t, Info{Modules: mods}, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	if got, want := open(nil).CallsiteProblem(3), "3 callsites are bare return addresses: the trace has no "+
		"module map (an older record wrote it); record the program again with a current record, which writes one, "+
		"to name them"; got != want {
		t.Errorf("no modules: %q, want %q", got, want)
	}
	if got := open(nil).CallsiteProblem(0); got != "" {
		t.Errorf("no modules, every callsite named: %q, want none", got)
	}
	r := open([]Module{{PID: 1, Start: 0x1000, End: 0x2000, Path: "/nonexistent/libgone.so"},
		{PID: 1, Start: 0x10000, End: 0x20000, Path: exe, BuildID: "00"}})
	for _, addr := range []uint64{0x1100, 0x1200, 0x10100, 0x30000} {
		r.Callsite(1, addr)
	}
	r.Callsite(1, 0x1100) // asked again: counted once
	want := "callsites without a function name: 2 in /nonexistent/libgone.so, not on this machine: run analyze " +
		"where the program was recorded; 1 in " + exe + ", rebuilt since the recording: run analyze on the " +
		"recorded build; 1 outside the recorded modules (JIT-compiled or unloaded code)"
	if got := r.CallsiteProblem(0); got != want {
		t.Errorf("problem %q, want %q", got, want)
	}
	if got := open([]Module{{PID: 1, Start: 0x1000, End: 0x2000, Path: exe}}).CallsiteProblem(0); got != "" {
		t.Errorf("nothing asked: %q, want none", got)
	}
}

// A callsite in a file without symbols (built with -s) is named by the file and offset, and
// CallsiteProblem says to install the debug symbols or build with -g.
func TestCallsiteProblemStripped(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a stripped program")
	}
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "p.c"), filepath.Join(dir, "stripped")
	if err := os.WriteFile(src, []byte("static int f(int x) { return x * 3; }\nint main(int argc, char **argv) { return f(argc); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-s", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	var load *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			load = p
		}
	}
	f.Close()
	if text == nil || load == nil {
		t.Fatal("no .text or executable segment")
	}
	mod := Module{PID: 1, Start: 0x400000, End: 0x400000 + load.Filesz, Offset: load.Off, Path: prog}
	r, err := Open(writeTrace(t, Info{Modules: []Module{mod}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := mod.Start + text.Offset - load.Off + 2
	c, ok := r.Callsite(1, addr)
	if want := fmt.Sprintf("stripped+%#x", text.Offset+2); !ok || c.Label != want {
		t.Errorf("callsite %+v %v, want %s", c, ok, want)
	}
	want := "callsites without a function name: 1 in " + prog + ", without symbols: install its debug symbols, " +
		"or build it with -g and without -s"
	if got := r.CallsiteProblem(0); got != want {
		t.Errorf("problem %q, want %q", got, want)
	}
}
