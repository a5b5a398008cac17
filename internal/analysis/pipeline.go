package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/sizeclass"
	"github.com/allocscope/allocscope/internal/analysis/internal/stats"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/internal/units"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// maxVerifyPasses bounds the extra simulation passes that grow the recommended arena until the
// recommended config runs without fallbacks.
const maxVerifyPasses = 2

// opener opens one pass over a stream of events.
type opener func() (Source, error)

// pass opens a source, runs f over it and closes it.
func (o opener) pass(warns *[]string, f func(Source) error) error {
	src, err := o()
	if err != nil {
		return err
	}
	err = f(src)
	if cerr := closeSource(src, warns); err == nil {
		err = cerr
	}
	return err
}

// progress returns a per-batch callback for stage, or nil. Stages are named "<stage> <input>";
// total is what the stage has to process (0 when unknown).
func progress(opts Options, stage string, total uint64) func(int) {
	if opts.Progress == nil {
		return nil
	}
	var n uint64
	return func(batch int) {
		n += uint64(batch)
		opts.Progress(stage, n, total)
	}
}

// callsiteNamer is a source that knows the code behind some callsites (*trace.Reader: a PyTorch
// snapshot's stacks, a recording's modules).
type callsiteNamer interface {
	Callsite(pid uint32, id uint64) (trace.Callsite, bool)
}

// callsiteBook is what the report keeps of a source's callsites besides their names, as the
// analysis asks for the names: the full stack of each name (as lines "function (file:line)"; of
// the stacks with one name, the least in lexical order, whatever order the names are asked in)
// and the callsites the source could not name.
type callsiteBook struct {
	stacks  map[string][]string
	unnamed map[[2]uint64]bool // pid, callsite
	problem func(unnamed int) string
}

// name names a callsite with n, noting its stack or that it has no name.
func (b *callsiteBook) name(n callsiteNamer, pid uint32, id uint64) (string, bool) {
	cs, ok := n.Callsite(pid, id)
	switch {
	case !ok && id != 0:
		b.unnamed[[2]uint64{uint64(pid), id}] = true
	case ok && len(cs.Frames) > 0:
		lines, kept := frameLines(cs.Frames), b.stacks[cs.Label]
		if kept == nil || slices.Compare(lines, kept) < 0 {
			b.stacks[cs.Label] = lines
		}
	}
	return cs.Label, ok
}

// note is the report's line on the callsites without a name: why, and what to do; "" when all
// have one.
func (b *callsiteBook) note() string {
	if b.problem != nil {
		return b.problem(len(b.unnamed))
	}
	if len(b.unnamed) > 0 {
		return fmt.Sprintf("%d callsites are shown as return addresses: the trace does not name them", len(b.unnamed))
	}
	return ""
}

// frameLines writes a stack's frames for people: "function (file:line)", "function (file)" or the
// file alone.
func frameLines(frames []trace.Frame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		where := f.File
		if f.Line > 0 {
			where = fmt.Sprintf("%s:%d", f.File, f.Line)
		}
		switch {
		case f.Function == "":
			out[i] = where
		case where == "":
			out[i] = f.Function
		default:
			out[i] = f.Function + " (" + where + ")"
		}
	}
	return out
}

// collect is the statistics pass. It also decodes the requests into the log that every later pass
// reads, on a goroutine of its own, batch by batch with the statistics.
func collect(src Source, opts Options) (*stats.Collector, *requests.Log, *callsiteBook, error) {
	c := stats.NewCollector(sizeclass.Thresholds)
	if opts.Detail {
		c.KeepDetail()
	}
	book := &callsiteBook{stacks: map[string][]string{}, unnamed: map[[2]uint64]bool{}}
	if p, ok := src.(interface{ CallsiteProblem(int) string }); ok {
		book.problem = p.CallsiteProblem
	}
	if n, ok := src.(callsiteNamer); ok {
		c.NameCallsites(func(pid uint32, id uint64) (string, bool) { return book.name(n, pid, id) })
	}
	d := requests.NewDecoder(opts.budget, opts.SpillDir)
	batches, decoded := make(chan []trace.Event), make(chan error)
	go func() {
		var err error
		for b := range batches {
			if err == nil {
				err = d.Add(b)
			}
			decoded <- err
		}
	}()
	defer close(batches)
	report := progress(opts, "statistics "+opts.input, 0)
	passed := passThrough(src)
	var kept []trace.Event
	for {
		b, err := src.Next()
		kept = requests.WithoutSizes(b, passed, kept[:0])
		batches <- kept
		c.Add(b)
		if derr := <-decoded; derr != nil {
			d.Close()
			return nil, nil, nil, fmt.Errorf("%s: %w", opts.input, derr)
		}
		if report != nil && len(b) > 0 {
			report(len(b))
		}
		if errors.Is(err, io.EOF) {
			log, _, err := d.Finish()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", opts.input, err)
			}
			return c, log, book, nil
		}
		if err != nil {
			d.Close()
			return nil, nil, nil, err
		}
	}
}

// passThrough returns the request sizes record --pool sends to CUDA for src's program: the sizes of
// the device allocations it exported by IPC (trace.Info.IPCExportSizes; pool.Config.PassThroughSizes).
func passThrough(src Source) []uint64 {
	if s, ok := src.(interface{ Info() trace.Info }); ok {
		return s.Info().IPCExportSizes
	}
	return nil
}

// analyzeStream runs every stage over one stream of events. It returns the stream's request log,
// for analyses across inputs; the caller closes it.
func analyzeStream(name string, open opener, opts Options) (*schema.TraceReport, []string, *requests.Log, error) {
	opts.input = filepath.Base(name)
	var warns []string
	var c *stats.Collector
	var log *requests.Log
	var info *schema.TraceInfo
	var states oomStates
	var memo *memoSource
	var passed []uint64
	var book *callsiteBook
	err := open.pass(&warns, func(src Source) (err error) {
		info = traceInfo(src)
		if states, err = newOOMStates(src); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		passed = passThrough(src)
		if w := lostEventsWarning(src); w != "" {
			warns = append(warns, opts.input+": "+w)
		}
		if states.snapshot != nil && opts.Capacity > 0 { // only explainModelOOM reads the events again
			memo = &memoSource{Source: src}
			src = memo
		}
		c, log, book, err = collect(src, opts)
		return err
	})
	if memo != nil && err == nil {
		open = memo.opener() // the out-of-memory replay reads the decoded snapshot from memory
	}
	if err != nil {
		if log != nil {
			_ = log.Close()
		}
		return nil, nil, nil, err
	}
	tr, err := analyzeRequests(name, open, c, log, states, info, opts, &warns)
	if err == nil && !opts.ranksMerged {
		tr.PerProcess, err = perProcess(opts.input, log, tr, opts)
	}
	if err != nil {
		_ = log.Close()
		return nil, nil, nil, err
	}
	tr.Info = info
	tr.Stacks, tr.CallsiteNote = book.stacks, book.note()
	if len(passed) > 0 {
		passThroughConfigs(tr, passed)
		warns = append(warns, fmt.Sprintf("%s: the program exported device allocations of %s by IPC "+
			"(cudaIpcGetMemHandle): record --pool sends requests of these sizes to CUDA "+
			"(pass_through_sizes), and the pool's plan leaves them out", opts.input, sizeList(passed)))
	}
	return tr, warns, log, nil
}

// passThroughConfigs writes the sizes record --pool sends to CUDA into tr's configs.
func passThroughConfigs(tr *schema.TraceReport, passed []uint64) {
	if tr.Config != nil {
		tr.Config.PassThroughSizes = passed
	}
	if tr.PerProcess != nil && tr.PerProcess.Config != nil {
		tr.PerProcess.Config.PassThroughSizes = passed
	}
}

// sizeList names byte counts for a sentence: "1 MiB, 4 KiB and 256 B".
func sizeList(sizes []uint64) string {
	names := make([]string, len(sizes))
	for i, n := range sizes {
		names[i] = units.FormatBytes(n)
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// analyzeRequests runs the stages after the statistics pass over the request log.
func analyzeRequests(name string, open opener, c *stats.Collector, log *requests.Log, states oomStates,
	info *schema.TraceInfo, opts Options, warns *[]string) (*schema.TraceReport, error) {
	st := c.Finish(opts.Top)
	if st.Events == 0 {
		return nil, fmt.Errorf("%s: empty trace: no events", name)
	}
	*warns = append(*warns, st.Warnings...)
	models := startModels(log, st.RequestLayer, st, opts)
	rec, err := chooseSizeClasses(name, log, st, opts, warns)
	if err != nil {
		_, _, _ = models.wait() // it reads the log, which the caller closes
		return nil, err
	}
	rec.oom = explainOOM(states, st.Anomalies.FailedAllocs, func(id uint64) string { return c.CallsiteName(0, id) })
	outs, err := simulate(log, st.RequestLayer, rec, st, models, opts)
	if err != nil {
		return nil, err
	}
	if rec.oom == nil { // the model's out-of-memory within --capacity, when the snapshot has none
		if rec.oom, err = explainModelOOM(open, st.RequestLayer, rec.torch, outs, opts.Capacity, c.CallsiteName); err != nil {
			return nil, err
		}
	}
	for _, o := range outs {
		if o.Err != nil {
			*warns = append(*warns, fmt.Sprintf("%s: %v", name, o.Err))
		}
	}
	tr := assemble(name, st, rec, outs, c.CallsiteName)
	applyFramework(tr, st, info)
	tr.Answer = answer(tr, st, info, opts.Capacity)
	return tr, nil
}

// traceInfo returns the metadata of a source that has some (*trace.Reader does).
func traceInfo(src Source) *schema.TraceInfo {
	s, ok := src.(interface{ Info() trace.Info })
	if !ok {
		return nil
	}
	i := s.Info()
	return &schema.TraceInfo{Source: i.Source, Command: i.Command, Host: i.Host, Driver: i.DriverVersion,
		GPUs: i.GPUNames}
}

// lostEventsWarning says that src's trace lacks events its recorder saw but could not write
// (trace.Info.LostEvents); "" when none were lost or src has no metadata.
func lostEventsWarning(src Source) string {
	s, ok := src.(interface{ Info() trace.Info })
	if !ok || s.Info().LostEvents <= 0 {
		return ""
	}
	return fmt.Sprintf("%s events were not recorded (full disk or unwritable log): leaks, peaks and the pool below "+
		"are from an incomplete trace", units.FormatCount(s.Info().LostEvents))
}

// chooseSizeClasses plans the classes for every candidate threshold, replays the trace through
// them (sizing pass), keeps the best candidate and fits its arena.
func chooseSizeClasses(name string, log *requests.Log, st *stats.Result, opts Options,
	warns *[]string) (*recommendation, error) {
	plans := make([]sizeclass.Plan, len(sizeclass.Thresholds))
	cands := make([]whatif.Candidate, len(plans))
	perStream := orderedStreams(st) > 1
	for i, th := range sizeclass.Thresholds {
		plans[i] = sizeclass.Choose(sizeTallies(st.Sizes), th, opts.K)
		cands[i] = whatif.Candidate{Threshold: th, Classes: plans[i].Classes, LargePeakLiveBytes: st.LargePeakLiveBytes[i],
			PerStream: perStream}
	}
	same := sameAs(log, cands)
	sizings, err := sizeOnce(log, cands, same, progress(opts, "sizing "+opts.input, log.Len()))
	if err != nil {
		return nil, err
	}
	peakLive := st.Requests.PeakLiveBytes
	var which []int // the contenders, each fitted once with those that behave the same
	for _, c := range contenders(sizings, peakLive) {
		if same[c] == c {
			which = append(which, c)
		}
	}
	fits, err := fitArenas(log, plans, sizings, which, peakLive, opts)
	if err != nil {
		return nil, err
	}
	for c, first := range same {
		sizings[c].ArenaPeakReservedBytes, fits[c] = sizings[first].ArenaPeakReservedBytes, fits[first]
	}
	best := bestCandidate(sizings, peakLive)
	if err := sizings[best].Err; err != nil {
		*warns = append(*warns, fmt.Sprintf("%s: size classes: %v", name, err))
	}
	rec := recommend(name, st, plans[best], sizings[best], fits[best], perStream, opts.PoolHeadroom)
	for i, sz := range sizings {
		rec.splits = append(rec.splits, schema.Split{Threshold: plans[i].Threshold, K: plans[i].K,
			ClassBytes: sz.ClassBytes(), ArenaBytes: sz.ArenaPeakReservedBytes,
			TotalBytes: sz.ClassBytes() + sz.ArenaPeakReservedBytes})
	}
	return rec, nil
}

// sameAs returns, for each candidate, the first candidate that behaves exactly as it does over log
// (itself when none does): the same classes, the same peak of large live bytes and no allocation
// of the log between their thresholds, so that the same requests go to the same classes and the
// rest to the same arena. Their sizings and arena fits are the same, so each is made once. The
// candidates' thresholds ascend.
func sameAs(log *requests.Log, cands []whatif.Candidate) []int {
	same := make([]int, len(cands))
	for i, c := range cands {
		same[i] = i
		if i == 0 {
			continue
		}
		p := cands[i-1]
		n, ok := log.AllocsBetween(p.Threshold, c.Threshold)
		if ok && n == 0 && slices.Equal(p.Classes, c.Classes) && p.LargePeakLiveBytes == c.LargePeakLiveBytes &&
			p.PerStream == c.PerStream {
			same[i] = same[i-1]
		}
	}
	return same
}

// sizeOnce sizes, in one pass over log, each candidate that is the first of those that behave the
// same (same, from sameAs), and gives the others its sizing.
func sizeOnce(log *requests.Log, cands []whatif.Candidate, same []int, progress func(int)) ([]whatif.Sizing, error) {
	var firsts []whatif.Candidate
	at := make([]int, len(cands)) // candidate → its first's index in firsts
	for i, c := range cands {
		if same[i] == i {
			at[i] = len(firsts)
			firsts = append(firsts, c)
		}
	}
	sized, err := whatif.Size(log, firsts, progress)
	if err != nil {
		return nil, err
	}
	sizings := make([]whatif.Sizing, len(cands))
	for i := range cands {
		sizings[i] = sized[at[same[i]]]
	}
	return sizings, nil
}

// modelRun is the simulation of the policies that need only the statistics (modelPolicies and the
// PYTORCH_CUDA_ALLOC_CONF search), started while the size classes are chosen: on a machine with
// cores to spare it overlaps the sizing and the arena fitting.
type modelRun struct {
	models int // policies of modelPolicies; the search's follow
	done   chan struct{}
	outs   []whatif.Outcome
	// byPID is, for a trace of several processes, each process's own outcomes of the search
	// (searchPerProcess), in the search's order; nil otherwise.
	byPID map[uint32][]whatif.Outcome
	err   error
}

// startModels starts the simulation of the policies that need only the statistics.
func startModels(log *requests.Log, stream requests.Layer, st *stats.Result, opts Options) *modelRun {
	policies := modelPolicies(opts.Capacity)
	m := &modelRun{models: len(policies), done: make(chan struct{})}
	var search []whatif.Policy
	if opts.PyTorchSearch || stream == requests.Framework || st.Requests.Allocs+st.Requests.Frees <= maxSearchRequests {
		search = torchCandidates(st, opts.Capacity)
	}
	go func() {
		defer close(m.done)
		if len(search) > 0 {
			var summed []whatif.Outcome
			var ok bool
			if summed, m.byPID, ok, m.err = searchPerProcess(log, search, opts); m.err != nil {
				return
			}
			if ok {
				m.outs, m.err = whatif.Run(log, policies, opts.Capacity, st.Calls, nil)
				m.outs = append(m.outs, summed...)
				return
			}
		}
		m.outs, m.err = whatif.Run(log, append(policies, search...), opts.Capacity, st.Calls, nil)
	}()
	return m
}

// wait returns the outcomes of modelPolicies and those of the search.
func (m *modelRun) wait() (models, search []whatif.Outcome, err error) {
	<-m.done
	if m.err != nil {
		return nil, nil, m.err
	}
	return m.outs[:m.models], m.outs[m.models:], nil
}

// simulate runs the policies that depend on the recommendation (recommendedPolicies, the paged
// variant, the recommended pool as record --pool runs it) in one pass, takes the model policies'
// and the search's outcomes from models, then re-simulates the recommended pool with a grown arena
// while it needed growth beyond its plan (verification). The outcomes are the what-if policies'
// in the report's order: the recommended pool, the paged variant if any, RMM's, the models.
func simulate(log *requests.Log, stream requests.Layer, rec *recommendation, st *stats.Result, models *modelRun,
	opts Options) ([]whatif.Outcome, error) {
	policies, withPaged := recommendedPolicies(rec), false
	if paged, ok := rec.pagedPolicy(); ok && opts.Arena != ArenaFixed {
		policies, withPaged = slices.Insert(policies, 1, paged), true
	}
	whatIfs := len(policies)
	deferred := stream != requests.Framework // the recommended pool as record --pool runs it
	if deferred {
		policies = append(policies, recordPoolPolicy(rec.policy()))
	}
	outs, err := whatif.Run(log, policies, opts.Capacity, st.Calls, progress(opts, "simulation "+opts.input, log.Len()))
	modelOuts, search, merr := models.wait() // whatever happened: the models read the log
	if err = cmp.Or(err, merr); err != nil {
		return nil, err
	}
	rec.torch = torchSearch(search, opts.Capacity)
	attachProcesses(rec.torch, search, models.byPID)
	if o := rec.oom; o != nil && o.RequestedBytes < o.CapacityBytes {
		// conservative: the setting's peak and the failed request together within what PyTorch could hold
		own := search // the failing process's own allocator, in a trace of several
		if outs, ok := models.byPID[o.PID]; ok {
			own = outs
		}
		o.Fits = bestWithin(own, o.CapacityBytes-o.RequestedBytes)
	}
	recordPool := outs[whatIfs:] // empty or the one deferred simulation
	outs = append(outs[:whatIfs:whatIfs], modelOuts...)
	for range maxVerifyPasses {
		grown, ok := rec.growArena(outs[0])
		if !ok {
			break
		}
		again := []whatif.Policy{grown}
		if deferred {
			again = append(again, recordPoolPolicy(grown))
		}
		res, err := whatif.Run(log, again, opts.Capacity, st.Calls, nil)
		if err != nil {
			return nil, err
		}
		outs[0], recordPool = res[0], res[1:]
	}
	switch {
	case withPaged && opts.Arena == ArenaPaged:
		rec.choosePaged(outs, 1, true)
	case withPaged:
		rec.notePaged(outs, 1)
	}
	rec.recordPool = recordPoolPrediction(rec, recordPool)
	return outs, nil
}

// recordPoolPolicy is p as record --pool runs it inside the program: synchronous frees deferred
// (and no memory map).
func recordPoolPolicy(p whatif.Policy) whatif.Policy {
	p.Name, p.Deferred, p.Map = "record-pool", true, false
	return p
}

// recordPoolPrediction is the record --pool figures of the deferred simulation (outs: empty or
// one), unless record --pool cannot serve the recommended pool: a paged arena, or a framework's
// requests (the pool inside the program would serve the framework's segments, not its blocks).
func recordPoolPrediction(rec *recommendation, outs []whatif.Outcome) *pool.DeferredPrediction {
	if len(outs) == 0 || outs[0].Err != nil || rec.config.SizeClass.ArenaPaging != nil {
		return nil
	}
	s := outs[0].Stats
	return &pool.DeferredPrediction{PeakReservedBytes: s.PeakReservedBytes, Fallbacks: s.Fallbacks, Syncs: s.Syncs}
}

func sizeTallies(in []stats.SizeTally) []sizeclass.Size {
	out := make([]sizeclass.Size, len(in))
	for i, s := range in {
		out[i] = sizeclass.Size{Bytes: s.Size, Count: s.Count, AtPeak: s.AtPeak}
	}
	return out
}

// bestCandidate applies sizeclass.ThresholdRule: the largest threshold (the latest candidate)
// whose class bytes plus arena bytes are within slackLimit of the least; candidates that could
// not be simulated come last.
func bestCandidate(sizings []whatif.Sizing, peakLive uint64) int {
	least, ok := leastTotal(sizings)
	if !ok {
		return len(sizings) - 1
	}
	limit, best := slackLimit(least, peakLive), -1
	for i, sz := range sizings {
		if sz.Err == nil && float64(sz.ClassBytes()+sz.ArenaPeakReservedBytes) <= limit {
			best = i
		}
	}
	return best
}

// leastTotal returns the least class bytes plus arena bytes of the candidates simulated.
func leastTotal(sizings []whatif.Sizing) (least uint64, ok bool) {
	for _, sz := range sizings {
		if b := sz.ClassBytes() + sz.ArenaPeakReservedBytes; sz.Err == nil && (!ok || b < least) {
			least, ok = b, true
		}
	}
	return least, ok
}

// slackLimit is the most a candidate may reserve and still be chosen, given the least any
// candidate reserves: sizeclass.ThresholdSlack more, but not beyond sizeclass.SlackCeiling times
// the peak of live bytes when the least is within that ceiling (the slack never pushes a pool
// that meets it over it).
func slackLimit(least, peakLive uint64) float64 {
	limit := float64(least) * (1 + sizeclass.ThresholdSlack)
	if ceiling := float64(peakLive) * sizeclass.SlackCeiling; float64(least) <= ceiling {
		limit = min(limit, ceiling)
	}
	return limit
}

// arenaProbes is how many fixed arena sizes fitArena tries per round and placement strategy;
// arenaRounds is how many rounds it makes, each narrowing the range between the largest size
// that failed and the smallest that served everything.
const (
	arenaProbes = 8
	arenaRounds = 3
)

// arenaSearch is fitArena's bisection for one placement strategy: an arena of lo bytes fails,
// one of hi bytes serves every large request once served is true.
type arenaSearch struct {
	fit    pool.Fit
	lo, hi uint64
	served bool
	dead   bool // hi failed too: the strategy needs more than the grown best-fit arena
}

// sizes returns the arena sizes to try next: up to arenaProbes between lo and hi, and hi itself
// while it is not known to serve.
func (a *arenaSearch) sizes() []uint64 {
	var sizes []uint64
	if a.dead {
		return nil
	}
	for j := uint64(1); j <= arenaProbes; j++ {
		s := pool.AlignUp(a.lo+(a.hi-a.lo)*j/(arenaProbes+1), 2*mib)
		if s > a.lo && s < a.hi && (len(sizes) == 0 || s > sizes[len(sizes)-1]) {
			sizes = append(sizes, s)
		}
	}
	if !a.served {
		sizes = append(sizes, a.hi)
	}
	return sizes
}

// narrow takes the probes of sizes(), ascending, into account: whether each of those sizes served
// every request.
func (a *arenaSearch) narrow(sizes []uint64, served []bool) {
	for i, b := range sizes {
		if served[i] {
			a.hi, a.served = min(a.hi, b), true
			break
		}
		a.lo = b
	}
	a.dead = !a.served
}

// contenders returns the candidates that can still be chosen once their arenas are fitted: those
// whose least possible total (class bytes plus the large requests' peak live bytes) is within
// slackLimit of the least total of a grown arena. Fitting only shrinks an arena, so
// no other candidate can come within the slack of the least fitted total.
func contenders(sizings []whatif.Sizing, peakLive uint64) []int {
	least, _ := leastTotal(sizings)
	limit := slackLimit(least, peakLive)
	var out []int
	for i, sz := range sizings {
		if sz.Err == nil && sz.LargePeakLiveBytes > 0 && float64(sz.ClassBytes()+sz.LargePeakLiveBytes) <= limit {
			out = append(out, i)
		}
	}
	return out
}

// fitArenas shrinks the arena of every contender (indexes into sizings) to the smallest single
// region (to 2 MiB) that serves its large requests without growing (whatif.LargeOps.Serves), when
// that is smaller than the grown best-fit arena's peak, searching every placement strategy
// (pool.Fits) of every contender in the same rounds, over the large requests' ops taken from the
// log once (held in memory or spilled as the budget allows). It returns each candidate's strategy
// that needs the least, pool.FitBest on a tie and for the others.
func fitArenas(log *requests.Log, plans []sizeclass.Plan, sizings []whatif.Sizing, which []int,
	peakLive uint64, opts Options) ([]pool.Fit, error) {
	searches := make([][]arenaSearch, len(sizings))
	for _, c := range which {
		for _, f := range pool.Fits {
			searches[c] = append(searches[c], arenaSearch{fit: f,
				lo: pool.AlignUp(sizings[c].LargePeakLiveBytes, 2*mib) - 2*mib,
				hi: sizings[c].ArenaPeakReservedBytes, served: f == pool.FitBest})
		}
	}
	if len(which) > 0 {
		large, err := extractLarge(log, plans, which, opts)
		if err != nil {
			return nil, err
		}
		defer large.Close()
		for range arenaRounds {
			if err := arenaRound(large, plans, searches); err != nil {
				return nil, fmt.Errorf("arena fit: %w", err)
			}
			prune(searches, sizings, peakLive)
		}
	}
	fits := make([]pool.Fit, len(sizings))
	for c := range sizings {
		fits[c] = pool.FitBest
		if len(searches[c]) == 0 {
			continue
		}
		best := 0
		for i, a := range searches[c] {
			if a.served && a.hi < searches[c][best].hi {
				best = i
			}
		}
		sizings[c].ArenaPeakReservedBytes = searches[c][best].hi
		fits[c] = searches[c][best].fit
	}
	return fits, nil
}

// prune stops the searches of every contender that can no longer be chosen: its arena needs more
// than the largest size that failed for each strategy, so its total exceeds that much plus its
// class bytes, and when that is beyond slackLimit of the least total served so far, it would be
// beyond the final limit too (the least only falls).
func prune(searches [][]arenaSearch, sizings []whatif.Sizing, peakLive uint64) {
	least, found := uint64(0), false
	for c, ss := range searches {
		for _, a := range ss {
			if t := sizings[c].ClassBytes() + a.hi; a.served && (!found || t < least) {
				least, found = t, true
			}
		}
	}
	if !found {
		return
	}
	limit := slackLimit(least, peakLive)
	for c, ss := range searches {
		if len(ss) == 0 {
			continue
		}
		floor := ss[0].lo
		for _, a := range ss {
			floor = min(floor, a.lo)
		}
		if float64(sizings[c].ClassBytes()+floor) >= limit {
			for i := range ss {
				ss[i].dead = true
			}
		}
	}
}

// extractLarge takes, in one read of the log, the ops of the requests above the least threshold of
// the contenders (which): every round's probes of every contender read them.
func extractLarge(log *requests.Log, plans []sizeclass.Plan, which []int, opts Options) (*whatif.LargeOps, error) {
	th := plans[which[0]].Threshold
	for _, c := range which {
		th = min(th, plans[c].Threshold)
	}
	large, err := whatif.ExtractLarge(log, th, opts.budget, opts.SpillDir, progress(opts, "arena "+opts.input, log.Len()))
	if err != nil {
		return nil, fmt.Errorf("arena fit: %w", err)
	}
	return large, nil
}

// roundSearch is one search's part of a round of probes: its sizes, ascending, the outcome of
// each, and the index of the smallest size found to serve (len(sizes) while none has); next and
// running are the scheduler's (guarded by its lock).
type roundSearch struct {
	search    *arenaSearch
	threshold uint64
	sizes     []uint64
	served    []bool
	first     atomic.Int64
	next      int // the smallest size not started
	running   int // probes running
}

// arenaRound makes one round of probes of every search over the large ops and narrows each search
// by them. GOMAXPROCS workers take probes one at a time: the smallest size not started of the
// search with the fewest probes running (so each search gets a core while there are fewer cores
// than searches, and the cores left over try its next sizes at once). A probe stops at its arena's
// first failure, and is skipped, or stopped, once a smaller size of its search has served
// everything: narrow reads the sizes only up to the first that serves, and those run to their end
// or first failure whatever happens. So each search narrows exactly as by trying its sizes one
// after another. It returns the first error reading the ops.
func arenaRound(large *whatif.LargeOps, plans []sizeclass.Plan, searches [][]arenaSearch) error {
	var rounds []*roundSearch
	for c := range searches {
		for i := range searches[c] {
			if sizes := searches[c][i].sizes(); len(sizes) > 0 {
				r := &roundSearch{search: &searches[c][i], threshold: plans[c].Threshold, sizes: sizes,
					served: make([]bool, len(sizes))}
				r.first.Store(int64(len(sizes)))
				rounds = append(rounds, r)
			}
		}
	}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for r, k := nextProbe(rounds); r != nil && first == nil; r, k = nextProbe(rounds) {
				mu.Unlock()
				err := r.probe(large, k)
				mu.Lock()
				r.running--
				first = cmp.Or(first, err)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	for _, r := range rounds {
		n := min(int(r.first.Load())+1, len(r.sizes))
		r.search.narrow(r.sizes[:n], r.served[:n])
	}
	return nil
}

// nextProbe returns the search and size to probe next (nil when none is left) and counts it as
// running; the caller holds the scheduler's lock.
func nextProbe(rounds []*roundSearch) (*roundSearch, int) {
	var best *roundSearch
	for _, r := range rounds {
		if r.next <= int(r.first.Load()) && r.next < len(r.sizes) && (best == nil || r.running < best.running) {
			best = r
		}
	}
	if best == nil {
		return nil, 0
	}
	best.next++
	best.running++
	return best, best.next - 1
}

// probe tries the search's size k, unless a smaller size has served everything.
func (r *roundSearch) probe(large *whatif.LargeOps, k int) error {
	moot := func() bool { return r.first.Load() < int64(k) }
	if moot() {
		return nil
	}
	p := whatif.ArenaProbe{Threshold: r.threshold, Bytes: r.sizes[k], Fit: r.search.fit}
	ok, err := large.Serves(p, moot)
	if err != nil || !ok {
		return err
	}
	r.served[k] = true
	for {
		first := r.first.Load()
		if first <= int64(k) || r.first.CompareAndSwap(first, int64(k)) {
			return nil
		}
	}
}
