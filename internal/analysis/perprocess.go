package analysis

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// perProcess sizes tr's recommended size-class pool for each process of a trace of several on its
// own, as analyzeRanks does for the ranks of several inputs: the classes of the merged analysis,
// each with the most slots one process needs, the largest arena one process needs, grown by what
// a process still had to add. nil for a trace of one process or without such a pool.
func perProcess(name string, log *requests.Log, tr *schema.TraceReport, opts Options) (*schema.PerProcess, error) {
	if tr.Config == nil || tr.Config.SizeClass == nil {
		return nil, nil
	}
	pids, logs, err := splitByProcess(log, opts)
	defer func() {
		for _, l := range logs {
			_ = l.Close()
		}
	}()
	if err != nil || len(pids) < 2 {
		return nil, err
	}
	inputs := make([]Input, len(pids))
	for i, pid := range pids {
		inputs[i] = Input{Name: fmt.Sprintf("%s pid %d", name, pid)}
	}
	cfg, err := sharedConfig(inputs, logs, tr.Config)
	if err != nil {
		return nil, err
	}
	rk := &schema.Ranks{Rows: make([]schema.RankRow, len(pids))}
	for range 2 {
		extra, err := verifyShared(inputs, logs, cfg, rk, opts)
		if err != nil {
			return nil, err
		}
		if extra == 0 {
			break
		}
		sc := *cfg.SizeClass
		sc.ArenaBytes = pool.AlignUp(sc.ArenaBytes+extra, pool.DefaultAlignment)
		cfg.SizeClass = &sc
	}
	return &schema.PerProcess{Processes: len(pids), Config: cfg, MergedPlanBytes: tr.Config.PlanBytes(),
		Fits: allServed(rk.Rows)}, nil
}

// splitByProcess splits log's ops by the process of their site into a log per process, ascending
// by pid; none when log keeps no sites. Slots stay the merged log's: a block is allocated and freed
// by one process. The caller closes the logs, also on error.
func splitByProcess(log *requests.Log, opts Options) ([]uint32, []*requests.Log, error) {
	byPID := map[uint32]*requests.Log{}
	var logs []*requests.Log
	fail := func(err error) ([]uint32, []*requests.Log, error) {
		return nil, logs, fmt.Errorf("split the requests by process: %w", err)
	}
	for r := log.Reader(); ; {
		ops, sites, err := r.Next(true)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		if len(sites) != len(ops) { // no sites: the processes cannot be told apart
			return nil, logs, nil
		}
		for start, end := 0, 0; start < len(ops); start = end {
			pid := sites[start].PID
			for end = start + 1; end < len(ops) && sites[end].PID == pid; end++ {
			}
			l := byPID[pid]
			if l == nil {
				l = requests.NewLog(opts.budget, "", false)
				byPID[pid] = l
				logs = append(logs, l)
			}
			if err := l.Append(ops[start:end], nil); err != nil {
				return fail(err)
			}
		}
	}
	pids := slices.Sorted(maps.Keys(byPID))
	sorted := make([]*requests.Log, len(pids))
	for i, pid := range pids {
		if err := byPID[pid].Finish(log.Handles(), log.Slots()); err != nil {
			return fail(err)
		}
		sorted[i] = byPID[pid]
	}
	return pids, sorted, nil
}
