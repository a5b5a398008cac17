// Package replay is the `replay` command: it replays a trace's allocation requests against the
// pooled allocator that pool.json describes, raw allocation and CUDA's stream-ordered allocator
// (and, when asked, the C pool that record --pool deploys), and prints what each measured.
package replay

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allocscope/allocscope/internal/requests"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/replay"
	_ "github.com/allocscope/allocscope/internal/replay/backend/host" // registers the "host" backend
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// ErrChecksFailed is returned when the replay ran but at least one check failed.
var ErrChecksFailed = errors.New("checks failed")

// Main runs the replay command with args and returns the process exit code: 0 when every check
// passed, 2 for a wrong command line, 1 on bad input, a failed replay or a failed check.
func Main(args []string, stdout, stderr io.Writer) int {
	return command.Execute(NewCommand(stdout, stderr), args)
}

// options are the command's flags.
type options struct {
	config        string
	backend       string
	modes         string
	repeat        int
	verify        bool
	touch         bool
	json          bool
	device        int
	hostCapacity  uint64
	peakTolerance float64
	maxOverhead   float64
	leakTolerance uint64
	progress      bool
	quiet         bool
}

// NewCommand returns the cobra command `replay`.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	var opt options
	cmd := &cobra.Command{
		Use:   "replay TRACE --config pool.json [flags]",
		Short: "Replay a trace against a pooled allocator, raw allocation and CUDA's stream-ordered allocator",
		Long: `replay drives the allocation requests of TRACE (an allocscope Arrow trace, a PyTorch memory
snapshot or an RMM logging CSV) through three allocators, interleaved repetition by repetition:
  raw    the backend's direct allocation per request (cuMemAlloc/cuMemFree; mmap on the host)
  pool   the allocator that pool.json describes (written by analyze --emit-config)
  async  cuMemAllocAsync/cuMemFreeAsync from a pool that keeps all freed memory
and, only when --modes names it:
  cpool  the same pool.json served by the shim's C pool, the pool record --pool deploys, the whole
         trace in one call into C (sizeclass configs without a paged arena)
Each repetition replays the trace twice per mode: a timed pass that reads the clock only once per
4096 requests (the allocator time and the speedups), and a checked pass that reads it around every
call (the latencies) and does the checks of --verify and --touch (cpool: the C code reads the clock
around every request; --verify checks after the run; --touch is skipped).
It reports per-call latency (p50, p99, mean), the time spent inside each allocator, the speedups,
peak reserved memory by its own account and by cuMemGetInfo, fallbacks and failures, and the
prediction in pool.json next to what it measured. It exits 1 when a check fails.

The cuda backend exists only in binaries built with the cuda build tag (make replay-cuda); the
host backend replays on mmap'd host memory and measures HOST memory, not GPU memory.`,
		Example: `  analyze -q --emit-config pool.json run.arrow && replay run.arrow --config pool.json
  replay run.arrow --config pool.json --repeat 5 --verify --touch
  replay run.arrow --config pool.json --modes raw,pool --json > replay.json
  replay run.arrow --config pool.json --modes raw,pool,cpool,async --verify
  replay run.arrow --config pool.json --backend host --host-capacity 64GiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(opt, args[0], stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.config, "config", "", "pool configuration `FILE` (pool.json), required")
	f.StringVar(&opt.backend, "backend", replay.DefaultBackend(), "memory to replay on: cuda or host")
	f.StringVar(&opt.modes, "modes", "raw,pool,async", "modes to run, comma-separated, in this order (raw, pool, cpool, async)")
	f.IntVar(&opt.repeat, "repeat", 3, "repetitions of the whole trace per mode, interleaved mode by mode (1 to 10000)")
	f.BoolVar(&opt.verify, "verify", false, "check after every allocation that no live blocks overlap and the block lies in reserved memory")
	f.BoolVar(&opt.touch, "touch", false, "write every block (memset) and read samples back, after allocation and before free")
	f.BoolVar(&opt.json, "json", false, "print the report as JSON instead of text")
	f.IntVar(&opt.device, "device", 0, "CUDA device ordinal (cuda backend)")
	command.BytesVar(f, &opt.hostCapacity, "host-capacity", 0, "memory the host backend may map, e.g. 64GiB (default: the machine's RAM)")
	f.Float64Var(&opt.peakTolerance, "peak-tolerance", 0.01, "largest relative difference of the pool's peak reserved memory from the prediction")
	f.Float64Var(&opt.maxOverhead, "max-overhead", 1.05, "largest ratio of the pool's peak reserved memory to the trace's peak live memory")
	command.BytesVar(f, &opt.leakTolerance, "leak-tolerance", 0, "memory the backend's free memory may end below its start, e.g. 2MiB")
	f.BoolVar(&opt.progress, "progress", false, "show progress on stderr even when it is not a terminal")
	f.BoolVarP(&opt.quiet, "quiet", "q", false, "print no progress and no notices on stderr (the report is still printed)")
	command.Setup(cmd, stdout, stderr)
	return cmd
}

// maxRepeat is the most repetitions --repeat takes: each replays the whole trace twice per mode,
// and more than this many is a typing error, not a measurement.
const maxRepeat = 10000

// positiveFinite reports whether x is a number above 0 and not infinite (NaN is neither).
func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// validate checks the flags and returns the modes to run. Its errors are usage errors.
func (o options) validate() ([]replay.Mode, error) {
	switch {
	case o.config == "":
		return nil, errors.New("--config is required: the pool.json to replay against (write one with analyze --emit-config)")
	case o.repeat < 1:
		return nil, fmt.Errorf("--repeat: %d is not a positive number", o.repeat)
	case o.repeat > maxRepeat:
		return nil, fmt.Errorf("--repeat: %d is more than %d repetitions", o.repeat, maxRepeat)
	case o.device < 0:
		return nil, fmt.Errorf("--device: %d is not a device ordinal (0 or more)", o.device)
	case !positiveFinite(o.peakTolerance):
		return nil, fmt.Errorf("--peak-tolerance: %g is not a number above 0", o.peakTolerance)
	case !positiveFinite(o.maxOverhead):
		return nil, fmt.Errorf("--max-overhead: %g is not a number above 0", o.maxOverhead)
	}
	if err := replay.BackendUnavailable(o.backend); err != nil {
		return nil, fmt.Errorf("--backend %s: %w", o.backend, err)
	}
	modes, err := replay.ParseModes(o.modes)
	if err != nil {
		return nil, fmt.Errorf("--modes: %w", err)
	}
	return modes, nil
}

func run(opt options, tracePath string, stdout, stderr io.Writer) error {
	modes, err := opt.validate()
	if err != nil {
		return command.Usage(err)
	}
	cfg, err := pool.LoadConfig(opt.config)
	if err != nil {
		return err
	}
	if err := replay.CheckConfig(cfg, modes); err != nil { // before the trace is read
		return fmt.Errorf("%s: %w", opt.config, err)
	}
	bar := newProgress(stderr, !opt.quiet && (opt.progress || command.IsTerminal(stderr)))
	tr, err := extract(tracePath, bar, cfg.PassThroughSizes)
	if err != nil {
		return err
	}
	b, err := replay.OpenBackend(opt.backend, replay.BackendOptions{Device: opt.device, HostCapacityBytes: opt.hostCapacity})
	if err != nil {
		return err
	}
	total := 2 * int64(len(tr.Ops)) * int64(len(modes)) * int64(opt.repeat) // a timed and a checked pass each
	rep, err := replay.Run(tr, b, cfg, replay.Options{Modes: modes, Repeat: opt.repeat, Verify: opt.verify,
		Touch: opt.touch, PeakTolerance: opt.peakTolerance, MaxOverhead: opt.maxOverhead,
		LeakToleranceBytes: opt.leakTolerance, Progress: bar.replaying(total)})
	bar.finish()
	err = errors.Join(err, b.Close())
	if err != nil {
		return fmt.Errorf("%s: %w", tracePath, err)
	}
	if err := write(opt, tracePath, rep, stdout); err != nil {
		return err
	}
	if failed := rep.Failed(); len(failed) > 0 {
		return fmt.Errorf("%d of %d checks failed: %s%s: %w", len(failed), len(rep.Checks), checkNames(failed),
			otherTrace(cfg.Prediction, tr, opt.config), ErrChecksFailed)
	}
	return nil
}

// otherTrace says, for checks that failed, that the pool.json was made for another trace: its
// prediction counts another number of requests than the trace holds. "" when they agree or the
// config has no prediction (hand-written).
func otherTrace(p *pool.Prediction, tr *replay.Trace, config string) string {
	if p == nil || p.Events == 0 {
		return ""
	}
	if n := tr.Stats.Allocs + tr.Stats.Frees; n != p.Events {
		return fmt.Sprintf(" (%s was made for another trace, %s: %d requests, where this one has %d)",
			config, cmp.Or(p.Trace, "unnamed"), p.Events, n)
	}
	return ""
}

func checkNames(cs []replay.Check) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, "; ")
}

// extract reads the trace's request stream, with the reader's warnings added to its own, without the
// requests of the sizes record --pool sends to CUDA (passed: pool.json's pass_through_sizes), as
// analyze sized and simulated the pool without them. It refuses a trace without events, as analyze
// does. The reader's errors name the file.
func extract(path string, bar replayProgress, passed []uint64) (*replay.Trace, error) {
	r, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	source := bar.reading(r)
	tr, err := replay.Extract(requests.SourceWithoutSizes(source, passed))
	warnings := r.Warnings()
	if err = errors.Join(err, r.Close()); err != nil {
		return nil, err
	}
	if *source.events == 0 {
		return nil, fmt.Errorf("%s: empty trace: no events", path) // analyze's words
	}
	tr.Warnings = append(warnings, tr.Warnings...)
	if len(passed) > 0 {
		tr.Warnings = append(tr.Warnings, fmt.Sprintf("the config sends %d request size(s) to CUDA "+
			"(pass_through_sizes: the program exported such blocks by IPC); their requests are not replayed", len(passed)))
	}
	return tr, nil
}

func write(opt options, tracePath string, rep *replay.Report, stdout io.Writer) error {
	if opt.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		return nil
	}
	if err := replay.WriteText(stdout, rep, tracePath, opt.config); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
