package analysis

import (
	"errors"
	"maps"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/analysis/internal/whatif"
	"github.com/allocscope/allocscope/internal/requests"
)

// searchPerProcess simulates the PYTORCH_CUDA_ALLOC_CONF candidates on each process of a trace of
// several on its own, as each process of a PyTorch program has its own caching allocator: the
// merged requests of two processes in one simulated allocator would share segments no real process
// shares. Each outcome it returns is one candidate summed over the processes (peak reserved: the
// sum of each process's peak, what their torch.cuda.max_memory_reserved() add up to; segments,
// releases, failures and retries: sums), and byPID holds each process's own outcomes, in the
// order of cands. ok is false for a trace of one process, or whose processes cannot be told apart,
// and then the merged outcomes stand.
func searchPerProcess(log *requests.Log, cands []whatif.Policy, opts Options) (outs []whatif.Outcome,
	byPID map[uint32][]whatif.Outcome, ok bool, err error) {
	pids, logs, err := splitByProcess(log, opts)
	defer func() {
		for _, l := range logs {
			err = errors.Join(err, l.Close())
		}
	}()
	if err != nil || len(pids) < 2 {
		return nil, nil, false, err
	}
	byPID = make(map[uint32][]whatif.Outcome, len(pids))
	outs = make([]whatif.Outcome, len(cands))
	for i, c := range cands {
		outs[i].Policy = c
	}
	for p, pl := range logs {
		res, err := whatif.Run(pl, cands, opts.Capacity, nil, nil)
		if err != nil {
			return nil, nil, false, err
		}
		byPID[pids[p]] = res
		for i, o := range res {
			addOutcome(&outs[i], o)
		}
	}
	return outs, byPID, true, nil
}

// addOutcome adds what one process did under a candidate to the sum: the statistics the search
// ranks by, and the first error.
func addOutcome(sum *whatif.Outcome, o whatif.Outcome) {
	s, t := &sum.Stats, o.Stats
	s.PeakReservedBytes += t.PeakReservedBytes
	s.UpstreamReserves += t.UpstreamReserves
	s.UpstreamReleases += t.UpstreamReleases
	s.Failures += t.Failures
	s.UpstreamFailures += t.UpstreamFailures
	if sum.Err == nil {
		sum.Err = o.Err
	}
}

// attachProcesses gives the defaults and the best settings of ts each process's peak reserved
// bytes, ascending by pid, from byPID (searchPerProcess's, each in the order of outs); nothing for
// a trace of one process.
func attachProcesses(ts *schema.TorchSearch, outs []whatif.Outcome, byPID map[uint32][]whatif.Outcome) {
	if ts == nil || len(byPID) == 0 {
		return
	}
	byConf := make(map[string][]schema.ProcessReserved, len(outs))
	for _, pid := range slices.Sorted(maps.Keys(byPID)) {
		for i, o := range byPID[pid] {
			conf := outs[i].Policy.Settings
			byConf[conf] = append(byConf[conf], schema.ProcessReserved{PID: pid, PeakReservedBytes: o.Stats.PeakReservedBytes})
		}
	}
	ts.Defaults.Processes = byConf[ts.Defaults.Conf]
	for i := range ts.Best {
		ts.Best[i].Processes = byConf[ts.Best[i].Conf]
	}
}
