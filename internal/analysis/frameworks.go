package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	fwdetect "github.com/allocscope/allocscope/internal/analysis/internal/framework"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// seeRequests says, per framework, how to get its own requests into a trace.
var seeRequests = map[fwdetect.Name]string{
	fwdetect.PyTorch: "record captures PyTorch's own requests unless it ran with --no-framework " +
		"(record again without it), or run the program with PYTORCH_NO_CUDA_MEMORY_CACHING=1 " +
		"(each request a cudaMalloc)",
	fwdetect.CuPy: "record captures CuPy's own requests unless it ran with --no-framework " +
		"(record again without it), or call cupy.cuda.set_allocator(None) at the start " +
		"(each request a cudaMalloc)",
	fwdetect.JAX: "run the program with XLA_PYTHON_CLIENT_ALLOCATOR=platform (each request a CUDA " +
		"call) or XLA_PYTHON_CLIENT_PREALLOCATE=false (the arena grows with the requests)",
}

// applyFramework notes the framework of tr: on a trace of driver calls only, the allocator that
// package framework finds, whose segments still live at the end are held, not leaked; on a trace
// of a framework's requests, the framework's own setting.
func applyFramework(tr *schema.TraceReport, st *stats.Result, info *schema.TraceInfo) {
	if st.RequestLayer == requests.Framework {
		tr.Framework = frameworkSetting(tr, st, info)
		return
	}
	ev := fwdetect.Evidence{Sites: st.Sites}
	if info != nil {
		ev.Command, ev.GPUs = info.Command, info.GPUs
	}
	f := fwdetect.Detect(ev)
	if f == nil {
		return
	}
	note := &schema.FrameworkNote{Framework: string(f.Framework), Layer: "driver", Evidence: f.Reasons,
		SeeRequests: seeRequests[f.Framework]}
	if f.Arena >= 0 {
		note.ArenaBytes, note.ArenaFraction = st.Sites[f.Arena].MaxSize, f.ArenaFraction
	}
	tr.Framework = note
	splitHeld(&tr.Anomalies, string(f.Framework), st.Sites, f.Held)
	if tr.Config != nil && tr.Config.Equivalents != nil {
		// The search took the segments for requests: its answer is not the program's.
		eq := *tr.Config.Equivalents
		eq.PyTorchAllocConf = ""
		tr.Config.Equivalents = &eq
	}
}

// splitHeld moves the blocks live at the end of the held sites from a's leaks to its
// HeldByAllocator.
func splitHeld(a *schema.Anomalies, fw string, sites []stats.SiteSummary, held []int) {
	h := &schema.Held{Framework: fw, Callsites: []string{}}
	var heldRefs, leakRefs []schema.EventRef
	for i, s := range sites {
		if !slices.Contains(held, i) {
			leakRefs = append(leakRefs, s.Oldest...)
			continue
		}
		h.Count += s.EndLiveBlocks
		h.Bytes += s.EndLiveBytes
		if s.EndLiveBlocks > 0 && !slices.Contains(h.Callsites, s.Callsite) {
			h.Callsites = append(h.Callsites, s.Callsite)
		}
		heldRefs = append(heldRefs, s.Oldest...)
	}
	if h.Count == 0 {
		return
	}
	h.Events = oldestRefs(heldRefs)
	a.Leaks.Count -= min(h.Count, a.Leaks.Count)
	a.Leaks.Bytes -= min(h.Bytes, a.Leaks.Bytes)
	a.Leaks.Events = oldestRefs(leakRefs)
	a.HeldByAllocator = h
}

// oldestRefs returns the five oldest of refs, as the leaks list them (by seq, time, process,
// device, address).
func oldestRefs(refs []schema.EventRef) []schema.EventRef {
	slices.SortFunc(refs, func(x, y schema.EventRef) int {
		return cmp.Or(cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.TimeNs, y.TimeNs), cmp.Compare(x.PID, y.PID),
			cmp.Compare(x.Device, y.Device), cmp.Compare(len(x.Address), len(y.Address)),
			strings.Compare(x.Address, y.Address))
	})
	out := []schema.EventRef{}
	return append(out, refs[:min(len(refs), 5)]...)
}

// requestFramework names the framework whose requests a trace of framework-layer requests holds,
// by its functions' prefix (torch.alloc, cupy.malloc, jax.*); "" for another (RMM).
func requestFramework(st *stats.Result) fwdetect.Name {
	for _, s := range st.Sites {
		prefix, _, _ := strings.Cut(s.Function, ".")
		switch prefix {
		case "torch":
			return fwdetect.PyTorch
		case "cupy":
			return fwdetect.CuPy
		case "jax", "xla":
			return fwdetect.JAX
		}
	}
	return ""
}

// frameworkSetting is the framework's own setting for a trace of its requests: PyTorch's best
// PYTORCH_CUDA_ALLOC_CONF of the search; CuPy's pool limit and JAX's memory fraction sized to the
// best-fit pool's peak reserved (a pool that splits and coalesces blocks, as theirs do), rounded
// up to 1 MiB.
func frameworkSetting(tr *schema.TraceReport, st *stats.Result, info *schema.TraceInfo) *schema.FrameworkNote {
	fw := requestFramework(st)
	note := &schema.FrameworkNote{Framework: string(fw), Layer: "framework"}
	peak := bestFitPeak(tr.Simulations)
	switch fw {
	case fwdetect.PyTorch:
		ts := tr.TorchSearch
		if ts == nil || !ts.Fits || len(ts.Best) == 0 {
			return nil
		}
		b := ts.Best[0]
		note.Setting = "PYTORCH_CUDA_ALLOC_CONF=" + b.Conf
		note.PeakReservedBytes, note.SavedBytes = b.PeakReservedBytes, b.SavedBytes
		note.DefaultsPeakReservedBytes = ts.Defaults.PeakReservedBytes
	case fwdetect.CuPy:
		if peak == 0 {
			return nil
		}
		note.Setting = fmt.Sprintf("cupy.get_default_memory_pool().set_limit(size=%d)", peak)
		note.PeakReservedBytes = peak
	case fwdetect.JAX:
		var gpus []string
		if info != nil {
			gpus = info.GPUs
		}
		total, ok := fwdetect.GPUTotal(gpus)
		if peak == 0 || !ok {
			return nil
		}
		fraction := math.Ceil(100*float64(peak)/float64(total)) / 100
		note.Setting = fmt.Sprintf("XLA_PYTHON_CLIENT_MEM_FRACTION=%.2f", fraction)
		note.PeakReservedBytes = peak
	default:
		return nil
	}
	return note
}

// bestFitPeak is the best-fit pool's peak reserved bytes rounded up to 1 MiB (0 when it failed).
func bestFitPeak(sims []schema.Simulation) uint64 {
	for _, s := range sims {
		if s.Name == "bestfit" && s.Error == "" && s.Failures == 0 {
			return pool.AlignUp(s.PeakReservedBytes, mib)
		}
	}
	return 0
}

// driverOnlyFramework returns the framework note of a trace of driver calls whose framework's
// allocator was found, else nil.
func driverOnlyFramework(tr *schema.TraceReport) *schema.FrameworkNote {
	if tr == nil || tr.Framework == nil || tr.Framework.Layer != "driver" {
		return nil
	}
	return tr.Framework
}
