package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// report assembles the Report of the modes' figures (checks and memory are added by Run).
func (r *runner) report(accs []*modeAcc) *Report {
	rep := &Report{
		Backend:            r.b.Name(),
		BackendIsHost:      r.b.IsHost(),
		BackendDescription: r.b.Description(),
		Policy:             r.cfg.Policy,
		Repeat:             r.opt.Repeat,
		Verify:             r.opt.Verify,
		Touch:              r.opt.Touch,
		ClockOverheadNs:    clockOverhead(r.opt.Clock),
		Trace:              r.t.Stats,
		Warnings:           append([]string{}, r.t.Warnings...),
		Prediction:         r.cfg.Prediction,
	}
	for _, acc := range accs {
		m := acc.ModeResult
		m.Alloc, m.Free = acc.allocLat.summary(), acc.freeLat.summary()
		m.AllocatorTimeNs = median(m.AllocatorTimeNsByRepetition)
		m.ClockedTimeNs = mean(acc.clockedNs)
		m.SyncTimeNs = mean(acc.syncNs)
		if m.Errors == nil {
			m.Errors = []string{}
		}
		rep.Modes = append(rep.Modes, m)
	}
	rep.SpeedupRawOverPool = ratio(rep.Mode(ModeRaw), rep.Mode(ModePool))
	rep.SpeedupAsyncOverPool = ratio(rep.Mode(ModeAsync), rep.Mode(ModePool))
	rep.RecordedNsPerRequest, rep.SpeedupRecordedOverPool = recordedRatio(r.t.Stats, rep.Mode(ModePool))
	if c := rep.Mode(ModeCPool); c != nil {
		rep.SpeedupRawOverCPool = ratio(rep.Mode(ModeRaw), c)
		rep.SpeedupAsyncOverCPool = ratio(rep.Mode(ModeAsync), c)
		rep.SpeedupPoolOverCPool = ratio(rep.Mode(ModePool), c)
		_, rep.SpeedupRecordedOverCPool = recordedRatio(r.t.Stats, c)
	}
	return rep
}

// recordedRatio returns the trace's recorded time per replayed request and its ratio to the
// pool's allocator time per request (0 when either is unknown).
func recordedRatio(t ExtractStats, p *ModeResult) (perRequest, speedup float64) {
	if t.RecordedCalls == 0 {
		return 0, 0
	}
	perRequest = float64(t.RecordedCallNs) / float64(t.RecordedCalls)
	if p == nil || p.AllocatorTimeNs <= 0 || t.Allocs+t.Frees == 0 {
		return perRequest, 0
	}
	return perRequest, perRequest / (float64(p.AllocatorTimeNs) / float64(t.Allocs+t.Frees))
}

// median returns the middle of ns (the mean of the two middle values for an even count), 0 for
// none: a repetition slowed by the machine (a preemption, a page-fault storm) does not move it.
func median(ns []int64) int64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ns))
	h := len(s) / 2
	if len(s)%2 == 1 {
		return s[h]
	}
	return s[h-1] + (s[h]-s[h-1])/2
}

func mean(ns []int64) int64 {
	var sum int64
	for _, n := range ns {
		sum += n
	}
	return sum / int64(max(len(ns), 1))
}

// ratio returns a's allocator time over b's, 0 when either is missing or b took no time.
func ratio(a, b *ModeResult) float64 {
	if a == nil || b == nil || b.AllocatorTimeNs <= 0 {
		return 0
	}
	return float64(a.AllocatorTimeNs) / float64(b.AllocatorTimeNs)
}

// checks returns the report's verdicts, each mode's first, then the pool's against the plan.
func checks(rep *Report, accs []*modeAcc, opt Options) []Check {
	var cs []Check
	for i, acc := range accs {
		cs = append(cs, modeChecks(&rep.Modes[i], acc, opt)...)
	}
	leak := Check{Name: "backend free memory back to its start", Status: CheckPass,
		Detail: fmt.Sprintf("%d bytes free at the start, %d at the end", rep.Memory.StartFreeBytes, rep.Memory.EndFreeBytes)}
	if rep.Memory.LeakedBytes > int64(opt.LeakToleranceBytes) {
		leak.Status = CheckFail
		leak.Detail += fmt.Sprintf(": %d bytes leaked (tolerance %d)", rep.Memory.LeakedBytes, opt.LeakToleranceBytes)
	}
	cs = append(cs, leak)
	return append(cs, poolChecks(rep, opt)...)
}

func verdict(name string, ok bool, detail string) Check {
	if ok {
		return Check{Name: name, Status: CheckPass, Detail: detail}
	}
	return Check{Name: name, Status: CheckFail, Detail: detail}
}

func skipped(name, why string) Check { return Check{Name: name, Status: CheckSkip, Detail: why} }

func modeChecks(m *ModeResult, acc *modeAcc, opt Options) []Check {
	p := string(m.Mode) + ": "
	allocDetail := fmt.Sprintf("%d failed (%d out of memory)", m.Failures, m.OOMs)
	if m.TimedFailures > 0 {
		allocDetail += fmt.Sprintf("; %d failed in the timed passes", m.TimedFailures)
	}
	freeDetail := fmt.Sprintf("%d refused", m.FreeErrors)
	if m.TimedFreeErrors > 0 {
		freeDetail += fmt.Sprintf("; %d refused in the timed passes", m.TimedFreeErrors)
	}
	cs := []Check{
		verdict(p+"every allocation succeeded", m.Failures == 0 && m.TimedFailures == 0, allocDetail),
		verdict(p+"every free succeeded", m.FreeErrors == 0 && m.TimedFreeErrors == 0, freeDetail),
		verdict(p+"allocator gave all memory back", m.LeakedBytes == 0,
			fmt.Sprintf("%d bytes still held after close", m.LeakedBytes)),
	}
	if m.Mode != ModeAsync {
		cs = append(cs, verdict(p+"allocator's stats match the engine's account", len(acc.accounting) == 0,
			strings.Join(append([]string{fmt.Sprintf("%d mismatches", len(acc.accounting))}, first(acc.accounting, 3)...), "; ")))
	}
	if opt.Verify {
		detail := fmt.Sprintf("%d allocations checked, %d overlaps, %d outside reserved memory", m.VerifyChecks, m.Overlaps, m.OutsideReserved)
		if m.Mode == ModeCPool {
			detail += " (after each run, against the memory reserved by its end)"
		}
		cs = append(cs, verdict(p+"verify: no overlapping blocks, all inside reserved memory",
			m.Overlaps == 0 && m.OutsideReserved == 0, detail))
	}
	switch {
	case opt.Touch && m.Mode == ModeCPool:
		cs = append(cs, skipped(p+"touch: every block kept its pattern",
			"the C pool serves the whole trace in one call into C: no block can be written between its requests"))
	case opt.Touch:
		cs = append(cs, verdict(p+"touch: every block kept its pattern", m.TouchFailures == 0,
			fmt.Sprintf("%d blocks written, %d read back wrong", m.Touched, m.TouchFailures)))
	}
	return cs
}

func first(lines []string, n int) []string { return lines[:min(n, len(lines))] }

// poolChecks compares the pool's peak reserved memory with the prediction and with peak live; and
// so the C pool's when the cpool mode ran, which must also be the Go pool's exactly.
func poolChecks(rep *Report, opt Options) []Check {
	cs := peakChecks(rep, opt, ModePool)
	if rep.Mode(ModeCPool) == nil {
		return cs
	}
	cs = append(cs, peakChecks(rep, opt, ModeCPool)...)
	if rep.Mode(ModePool) != nil {
		cs = append(cs, samePoolCheck(rep.Mode(ModePool), rep.Mode(ModeCPool)))
	}
	return cs
}

// peakChecks compares mode's peak reserved memory with the prediction and with peak live.
func peakChecks(rep *Report, opt Options, mode Mode) []Check {
	predName := fmt.Sprintf("%s: peak reserved within %g%% of the prediction", mode, opt.PeakTolerance*100)
	overName := fmt.Sprintf("%s: peak reserved <= %g x peak live", mode, opt.MaxOverhead)
	m := rep.Mode(mode)
	if m == nil {
		return []Check{skipped(predName, string(mode)+" mode not run"), skipped(overName, string(mode)+" mode not run")}
	}
	var cs []Check
	if p := rep.Prediction; p == nil || p.PeakReservedBytes == 0 {
		cs = append(cs, skipped(predName, "pool.json has no prediction"))
	} else {
		diff := math.Abs(float64(m.PeakReservedBytes)-float64(p.PeakReservedBytes)) / float64(p.PeakReservedBytes)
		cs = append(cs, verdict(predName, diff <= opt.PeakTolerance,
			fmt.Sprintf("measured %d bytes, predicted %d (%+.3f%%)", m.PeakReservedBytes, p.PeakReservedBytes,
				100*(float64(m.PeakReservedBytes)/float64(p.PeakReservedBytes)-1))))
	}
	live := rep.Trace.PeakLiveBytes
	if live == 0 {
		return append(cs, skipped(overName, "trace allocates nothing"))
	}
	return append(cs, verdict(overName, float64(m.PeakReservedBytes) <= opt.MaxOverhead*float64(live),
		fmt.Sprintf("peak reserved %d bytes, peak live %d (%.4f x)", m.PeakReservedBytes, live,
			float64(m.PeakReservedBytes)/float64(live))))
}

// samePoolCheck checks that the C pool (cpool mode) did what package pool did (pool mode): the
// same counters in the first repetition, now and at peak reserved memory, and the same peak
// reserved memory, upstream reserves, fallbacks and failures over all.
func samePoolCheck(p, c *ModeResult) Check {
	same := p.PeakReservedBytes == c.PeakReservedBytes && p.UpstreamReserves == c.UpstreamReserves &&
		p.Fallbacks == c.Fallbacks && p.Failures == c.Failures && p.TimedFailures == c.TimedFailures &&
		p.PoolStats != nil && c.PoolStats != nil && *p.PoolStats == *c.PoolStats && *p.PoolPeakStats == *c.PoolPeakStats
	detail := fmt.Sprintf("peak reserved %d and %d bytes, %d and %d upstream reserves, %d and %d fallbacks, %d and %d failures",
		p.PeakReservedBytes, c.PeakReservedBytes, p.UpstreamReserves, c.UpstreamReserves, p.Fallbacks, c.Fallbacks,
		p.Failures+p.TimedFailures, c.Failures+c.TimedFailures)
	if !same {
		detail += fmt.Sprintf("; pool stats %+v and %+v", p.PoolStats, c.PoolStats)
	}
	return verdict("cpool: the same pool as pool mode's", same, detail)
}
