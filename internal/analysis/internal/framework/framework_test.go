package framework

import (
	"testing"

	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
)

func TestCommandNames(t *testing.T) {
	for _, c := range []struct {
		fw   Name
		cmd  []string
		want string
	}{
		{PyTorch, []string{"torchrun", "--nproc_per_node=8", "train.py"}, "torchrun"},
		{PyTorch, []string{"python3", "/home/u/Train_Torch.py"}, "/home/u/Train_Torch.py"},
		{PyTorch, []string{"python3", "/opt/torch/bin/train.py"}, ""}, // a directory is not the program
		{CuPy, []string{"python3", "-m", "cupyx.bench"}, "cupyx.bench"},
		{JAX, []string{"python3", "train.py"}, ""},
	} {
		if got := CommandNames(c.fw, c.cmd); got != c.want {
			t.Errorf("CommandNames(%s, %q) = %q, want %q", c.fw, c.cmd, got, c.want)
		}
	}
}

func TestGPUTotal(t *testing.T) {
	if n, ok := GPUTotal([]string{"NVIDIA H200"}); !ok || n != 150_109_880_320 {
		t.Errorf("H200: %d %v", n, ok)
	}
	if n, ok := GPUTotal([]string{"NVIDIA GeForce RTX 4090"}); ok || n != 0 {
		t.Errorf("an unknown GPU: %d %v", n, ok)
	}
}

func TestSegmentRules(t *testing.T) {
	torch := stats.SiteSummary{Function: "cudaMalloc", Allocs: 3, Exact2MiB: 1, Exact20MiB: 1}
	for _, c := range []struct {
		name         string
		s            stats.SiteSummary
		torch, cupyP bool
	}{
		{"PyTorch's segments", torch, true, true},
		{"expandable segments' pages", stats.SiteSummary{Function: "cuMemCreate", Allocs: 2, Exact20MiB: 2}, true, false},
		{"a free", stats.SiteSummary{Function: "cudaMalloc", Allocs: 3, Frees: 1, Exact2MiB: 3}, false, false},
		{"a size not of 2 MiB", stats.SiteSummary{Function: "cudaMalloc", Allocs: 3, Not2MiB: 1, Exact2MiB: 1}, false, true},
		{"no 2 MiB nor 20 MiB", stats.SiteSummary{Function: "cudaMalloc", Allocs: 2}, false, true},
		{"a size not of 512 B", stats.SiteSummary{Function: "cudaMalloc", Allocs: 2, Not2MiB: 2, Not512: 1}, false, false},
		{"cuMemAlloc", stats.SiteSummary{Function: "cuMemAlloc_v2", Allocs: 1, Exact2MiB: 1}, false, false},
	} {
		if got := TorchSegments(c.s); got != c.torch {
			t.Errorf("%s: TorchSegments = %v", c.name, got)
		}
		if got := CuPyPool(c.s); got != c.cupyP {
			t.Errorf("%s: CuPyPool = %v", c.name, got)
		}
	}
}

// Detect picks PyTorch before CuPy: PyTorch's segments are also multiples of 512 B.
func TestDetectOrderAndHeld(t *testing.T) {
	sites := []stats.SiteSummary{
		{Callsite: "0x1", Function: "cudaMalloc", Allocs: 2, Exact2MiB: 1, Exact20MiB: 1, EndLiveBlocks: 2, EndLiveBytes: 22 << 20},
		{Callsite: "0x2", Function: "cudaMalloc", Allocs: 1, Not2MiB: 1, EndLiveBlocks: 1, EndLiveBytes: 4096},
	}
	f := Detect(Evidence{Command: []string{"python3", "cupy_and_torch.py"}, Sites: sites})
	if f == nil || f.Framework != PyTorch || len(f.Held) != 1 || f.Held[0] != 0 || f.Arena != -1 {
		t.Fatalf("Detect = %+v, want PyTorch holding site 0", f)
	}
	want := []string{"the command line names torch (cupy_and_torch.py)",
		"cudaMalloc at 0x1: 2, all multiples of 2 MiB (1 of 2 MiB, 1 of 20 MiB), none freed"}
	if len(f.Reasons) != 2 || f.Reasons[0] != want[0] || f.Reasons[1] != want[1] {
		t.Errorf("reasons = %q, want %q", f.Reasons, want)
	}
	if f := Detect(Evidence{Sites: sites[1:]}); f != nil {
		t.Errorf("a program's own leak: Detect = %+v, want nil", f)
	}
}

// JAX's arena freed at exit is still its arena: the note stands, nothing is held.
func TestDetectJAXArenaFreedAtExit(t *testing.T) {
	sites := []stats.SiteSummary{{Callsite: "0x3", Function: "cuMemAlloc_v2", Allocs: 1, Frees: 1, MaxSize: 100 << 30}}
	f := Detect(Evidence{Command: []string{"python3", "jax_train.py"}, Sites: sites})
	if f == nil || f.Framework != JAX || f.Arena != 0 || len(f.Held) != 0 || f.ArenaFraction != 0 {
		t.Fatalf("Detect = %+v", f)
	}
	if r := f.Reasons; len(r) != 2 || r[1] != "one cuMemAlloc_v2 of 100 GiB, the largest allocation" {
		t.Errorf("reasons = %q", r)
	}
}
