package analysis

import (
	"fmt"

	fwdetect "github.com/allocscope/allocscope/internal/analysis/internal/framework"
	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/units"
)

// actions lists the anomalies of tr that need action, most serious first: an out-of-memory, failed
// allocations (but the one the out-of-memory explains), leaks, double frees, frees of unknown
// addresses. Memory a framework's allocator held until exit is not among them.
func actions(tr *schema.TraceReport) []schema.Action {
	out := []schema.Action{}
	an := &tr.Anomalies
	failed := an.FailedAllocs.Count
	if o := tr.OOM; o != nil {
		out = append(out, schema.Action{Kind: schema.ActionOOM, Count: 1, Bytes: o.RequestedBytes, Seq: o.Seq,
			Summary: oomSummary(o)})
		if o.Simulated == nil {
			failed -= min(failed, 1) // the snapshot's out-of-memory is one of its failed requests
		}
	}
	if failed > 0 {
		out = append(out, anomalyAction(schema.ActionFailed, failed, &an.FailedAllocs,
			[2]string{"failed allocation", "failed allocations"}, "%s asked for"))
	}
	for _, k := range []struct {
		kind  string
		nouns [2]string
		bytes string
		a     *schema.Anomaly
	}{
		{schema.ActionLeak, [2]string{"block never freed", "blocks never freed"}, "%s live at the end", &an.Leaks},
		{schema.ActionDoubleFree, [2]string{"double free", "double frees"}, "", &an.DoubleFrees},
		{schema.ActionUnknownFree, [2]string{"free of an unknown address", "frees of unknown addresses"}, "", &an.UnknownFrees},
	} {
		if k.a.Count > 0 {
			out = append(out, anomalyAction(k.kind, k.a.Count, k.a, k.nouns, k.bytes))
		}
	}
	return out
}

// anomalyAction is the action of count events of an anomaly: the count and its noun (nouns: the
// singular and the plural), the bytes in the words of bytesFormat ("" for none), the first event's
// seq and callsite.
func anomalyAction(kind string, count uint64, a *schema.Anomaly, nouns [2]string, bytesFormat string) schema.Action {
	noun := nouns[1]
	if count == 1 {
		noun = nouns[0]
	}
	act := schema.Action{Kind: kind, Count: count, Bytes: a.Bytes,
		Summary: units.FormatCount(int64(count)) + " " + noun}
	if bytesFormat != "" {
		act.Summary += " (" + fmt.Sprintf(bytesFormat, units.FormatBytes(a.Bytes)) + ")"
	}
	if len(a.Events) > 0 {
		e := a.Events[0]
		act.Seq = e.Seq
		act.Summary += fmt.Sprintf(", the first at seq %d", e.Seq)
		if e.Callsite != "" && e.Callsite != "0x0" {
			act.Summary += " from " + clipRunes(e.Callsite, 40)
		}
	}
	return act
}

// oomSummary says what an out-of-memory asked for and what would have fit.
func oomSummary(o *schema.OOMReport) string {
	where := "the snapshot"
	if o.Simulated != nil {
		where = "the model within " + units.FormatBytes(o.CapacityBytes)
	}
	s := fmt.Sprintf("out of memory at seq %d in %s: asked for %s with %s reserved", o.Seq, where,
		units.FormatBytes(o.RequestedBytes), units.FormatBytes(o.ReservedBytes))
	if o.Fits != nil {
		return s + fmt.Sprintf("; PYTORCH_CUDA_ALLOC_CONF=%s would fit", o.Fits.Conf)
	}
	return s + "; no setting of the search fits"
}

// clipRunes shortens s to at most n runes, marking the cut with "…".
func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// equivalentsThatApply names the other allocators' settings that apply to the program:
// PYTORCH_CUDA_ALLOC_CONF when it runs PyTorch (its allocator or requests found, or its command
// names torch), RMM's pool when its requests are RMM's, the cudaMemPool release threshold when it
// makes stream-ordered requests (on a stream other than the legacy default).
func equivalentsThatApply(tr *schema.TraceReport, now schema.Today, info *schema.TraceInfo) []string {
	out := []string{}
	var cmd []string
	if info != nil {
		cmd = info.Command
	}
	fw := tr.Framework
	if now.Allocator == schema.AllocatorPyTorch || (fw != nil && fw.Framework == string(fwdetect.PyTorch)) ||
		fwdetect.CommandNames(fwdetect.PyTorch, cmd) != "" {
		out = append(out, schema.EquivalentPyTorch)
	}
	if now.Allocator == schema.AllocatorRMM {
		out = append(out, schema.EquivalentRMM)
	}
	if tr.RequestLayer == string(requests.Device) {
		for _, g := range tr.Groups {
			if g.Allocs > 0 && g.Stream != 0 {
				out = append(out, schema.EquivalentMemPool)
				break
			}
		}
	}
	return out
}
