// Package framework tells, in a trace of driver and runtime calls only (no framework-layer
// requests), the memory a framework's own allocator took from CUDA and holds until exit: PyTorch's
// caching allocator's segments, CuPy's memory pool's blocks, JAX's (XLA's BFC) arena. Such memory
// is not leaked, and its sizes are the framework's segments, not the program's requests.
//
// Detect applies the rules below, each to the callsites of the trace's requests
// (stats.SiteSummary), in this order; the first framework with a matching site wins, and every site
// that matches its rules is held by its allocator.
//
// Evidence that names a framework:
//   - names: a callsite's name (from the module maps record saves) contains CUDACachingAllocator,
//     c10::cuda:: or libc10_cuda (PyTorch); cupy (CuPy); xla::, BFCAllocator, stream_executor,
//     jaxlib or libxla (JAX);
//   - command: an argument of the recorded command line (trace.Info.Command), lower-cased, contains
//     torch, cupy or jax (python3 train_torch.py, torchrun ..., python -m jax_app ...).
//
// PyTorch's segments: a site whose allocations are all cudaMalloc calls (cuMemCreate with
// expandable_segments:True, its pages) of multiples of 2 MiB,
// with at least one of exactly 2 MiB (a small segment) or 20 MiB (a large segment), none of them
// freed (the caching allocator frees only at torch.cuda.empty_cache()), some live at the end; with
// names or command evidence for PyTorch, or with both a 2 MiB and a 20 MiB segment (the two kinds
// PyTorch makes) when there is none. A site named by PyTorch's allocator is held whatever its
// sizes.
//
// CuPy's pool: a site whose allocations are all cudaMalloc calls of multiples of 512 B (the pool
// rounds every request to 512 B), none freed, some live at the end, with names or command evidence
// for CuPy (with cupy.cuda.set_allocator(None) CuPy frees what it allocates, and this rule does
// not match). A site named by CuPy is held whatever its sizes.
//
// JAX's arena: a site with one allocation of at least 1 GiB, its trace's largest, with names or
// command evidence for JAX, or between 70 % and 80 % of the GPU's total memory when the GPU is
// one of KnownTotals (XLA preallocates 75 % of the device at start by default). The arena need not
// be live at the end: JAX may free it at exit; it is the Finding's Arena either way.
package framework

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/units"
)

// Name is a framework Detect tells.
type Name string

// The frameworks Detect tells.
const (
	PyTorch Name = "PyTorch"
	CuPy    Name = "CuPy"
	JAX     Name = "JAX"
)

// Evidence is what Detect reads: the recorded command line, the GPUs' names and every callsite
// of the requests (driver and runtime calls).
type Evidence struct {
	Command []string
	GPUs    []string
	Sites   []stats.SiteSummary
}

// Finding is a framework's allocator found in a trace.
type Finding struct {
	Framework Name
	// Reasons are the rules that matched, one sentence each.
	Reasons []string
	// Held are the indexes (in Evidence.Sites) of the sites whose blocks live at the end the
	// framework's allocator holds.
	Held []int
	// Arena is the index of JAX's preallocated arena in Evidence.Sites (-1 for the others);
	// ArenaFraction its share of the GPU's total memory (0 when the GPU is not known).
	Arena         int
	ArenaFraction float64
}

// KnownTotals is the total memory CUDA reports for GPUs by a part of their name (measured on the
// H200 of docs/benchmarks.md: cuDeviceTotalMem and torch's total_memory, 2026-12-04).
var KnownTotals = map[string]uint64{"H200": 150_109_880_320}

// GPUTotal returns the total memory of the first GPU whose name contains a key of KnownTotals.
func GPUTotal(gpus []string) (uint64, bool) {
	for _, g := range gpus {
		for part, total := range KnownTotals {
			if strings.Contains(g, part) {
				return total, true
			}
		}
	}
	return 0, false
}

// The signatures of each framework: in callsite names, in the command line.
var (
	siteNames = map[Name][]string{
		PyTorch: {"CUDACachingAllocator", "c10::cuda::", "libc10_cuda"},
		CuPy:    {"cupy"},
		JAX:     {"xla::", "BFCAllocator", "stream_executor", "jaxlib", "libxla"},
	}
	commandWords = map[Name]string{PyTorch: "torch", CuPy: "cupy", JAX: "jax"}
)

// Sizes of the rules.
const (
	gib            = 1 << 30
	minArenaBytes  = 1 * gib
	arenaLowShare  = 0.70
	arenaHighShare = 0.80
)

// Detect returns the framework allocator that ev shows, or nil when no rule matches.
func Detect(ev Evidence) *Finding {
	for _, fw := range []Name{PyTorch, CuPy, JAX} {
		if f := detect(fw, ev); f != nil {
			return f
		}
	}
	return nil
}

// detect applies fw's rules to ev.
func detect(fw Name, ev Evidence) *Finding {
	f := &Finding{Framework: fw, Arena: -1}
	named := NamedBy(fw, ev.Sites)
	cmd := CommandNames(fw, ev.Command)
	if fw == JAX {
		return jaxArena(f, ev, named, cmd)
	}
	for i, s := range ev.Sites {
		if s.EndLiveBlocks == 0 {
			continue
		}
		if named[i] {
			f.Held = append(f.Held, i)
			continue
		}
		var ok bool
		if fw == PyTorch {
			ok = TorchSegments(s) && (cmd != "" || anyNamed(named) || s.Exact2MiB > 0 && s.Exact20MiB > 0)
		} else {
			ok = CuPyPool(s) && (cmd != "" || anyNamed(named))
		}
		if ok {
			f.Held = append(f.Held, i)
		}
	}
	if len(f.Held) == 0 {
		return nil
	}
	f.Reasons = reasons(fw, ev, f.Held, named, cmd)
	return f
}

// TorchSegments reports whether a site's allocations look like PyTorch's caching allocator's
// segments: cudaMalloc (or cuMemCreate, expandable segments' pages) of multiples of 2 MiB, a 2 MiB
// or 20 MiB one among them, none freed.
func TorchSegments(s stats.SiteSummary) bool {
	return (s.Function == "cudaMalloc" || s.Function == "cuMemCreate") && s.Allocs > 0 && s.Not2MiB == 0 && s.Exact2MiB+s.Exact20MiB > 0 && s.Frees == 0
}

// CuPyPool reports whether a site's allocations look like CuPy's memory pool's: cudaMalloc of
// multiples of 512 B, none freed.
func CuPyPool(s stats.SiteSummary) bool {
	return s.Function == "cudaMalloc" && s.Allocs > 0 && s.Not512 == 0 && s.Frees == 0
}

// NamedBy marks the sites whose names carry fw's signature.
func NamedBy(fw Name, sites []stats.SiteSummary) []bool {
	named := make([]bool, len(sites))
	for i, s := range sites {
		for _, sig := range siteNames[fw] {
			if strings.Contains(s.Callsite, sig) {
				named[i] = true
			}
		}
	}
	return named
}

// CommandNames returns the first argument of cmd that names fw (its base name, lower-cased,
// contains fw's word), or "".
func CommandNames(fw Name, cmd []string) string {
	for _, arg := range cmd {
		if strings.Contains(strings.ToLower(filepath.Base(arg)), commandWords[fw]) {
			return arg
		}
	}
	return ""
}

func anyNamed(named []bool) bool {
	for _, n := range named {
		if n {
			return true
		}
	}
	return false
}

// jaxArena applies the JAX rule: one allocation of at least 1 GiB, the trace's largest.
func jaxArena(f *Finding, ev Evidence, named []bool, cmd string) *Finding {
	largest := -1
	for i, s := range ev.Sites {
		if largest < 0 || s.MaxSize > ev.Sites[largest].MaxSize {
			largest = i
		}
	}
	if largest < 0 {
		return nil
	}
	s := ev.Sites[largest]
	if s.Allocs != 1 || s.MaxSize < minArenaBytes {
		return nil
	}
	total, known := GPUTotal(ev.GPUs)
	if known {
		f.ArenaFraction = float64(s.MaxSize) / float64(total)
	}
	share := known && f.ArenaFraction >= arenaLowShare && f.ArenaFraction <= arenaHighShare
	if !named[largest] && cmd == "" && !share {
		return nil
	}
	f.Arena = largest
	if s.EndLiveBlocks > 0 {
		f.Held = []int{largest}
	}
	f.Reasons = reasons(JAX, ev, []int{largest}, named, cmd)
	if share {
		f.Reasons = append(f.Reasons, fmt.Sprintf("one %s of %.1f%% of the %s's memory, the largest allocation",
			s.Function, 100*f.ArenaFraction, ev.GPUs[0]))
	} else {
		f.Reasons = append(f.Reasons, fmt.Sprintf("one %s of %s, the largest allocation", s.Function, units.FormatBytes(s.MaxSize)))
	}
	return f
}

// reasons states the evidence of fw's rules for the sites held.
func reasons(fw Name, ev Evidence, held []int, named []bool, cmd string) []string {
	var out []string
	if cmd != "" {
		out = append(out, fmt.Sprintf("the command line names %s (%s)", commandWords[fw], cmd))
	}
	for _, i := range held {
		s := ev.Sites[i]
		switch {
		case named[i]:
			out = append(out, fmt.Sprintf("callsite %s is %s's allocator", s.Callsite, fw))
		case fw == PyTorch:
			out = append(out, fmt.Sprintf("%s at %s: %d, all multiples of 2 MiB (%d of 2 MiB, %d of 20 MiB), none freed",
				s.Function, s.Callsite, s.Allocs, s.Exact2MiB, s.Exact20MiB))
		case fw == CuPy:
			out = append(out, fmt.Sprintf("%s at %s: %d, all multiples of 512 B, none freed", s.Function, s.Callsite, s.Allocs))
		}
	}
	return out
}
