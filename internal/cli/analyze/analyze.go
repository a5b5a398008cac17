// Package analyze is the `analyze` command: it reads traces, prints what the analysis package
// finds and writes the recommended pool.json.
package analyze

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/allocscope/allocscope/internal/analysis"
	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/outfile"
	"github.com/allocscope/allocscope/internal/poolactivity"
	"github.com/allocscope/allocscope/pool"
	"github.com/allocscope/allocscope/trace"
)

// bundledInput is what analyze reads when it is given no file: the real PyTorch training trace
// embedded in the binary (BundledTrace), so it works from any directory.
func bundledInput() analysis.Input {
	return analysis.Input{Name: BundledTraceName, Open: func() (analysis.Source, error) {
		return trace.OpenBytes(BundledTraceName, BundledTrace)
	}}
}

// Main runs the analyze command with args and returns the process exit code: 0, 2 for a wrong
// command line, 1 when the analysis failed.
func Main(args []string, stdout, stderr io.Writer) int {
	return command.Execute(NewCommand(stdout, stderr), args)
}

// options are the command's flags.
type options struct {
	capacity   uint64
	memory     uint64
	json       bool
	explain    bool
	html       string
	emitConfig string
	top        int
	k          int
	arena      string
	headroom   float64
	torchConf  bool
	quiet      bool
	progress   bool
	compare    bool
}

// NewCommand returns the cobra command `analyze`.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	var opt options
	cmd := &cobra.Command{
		Use:   "analyze [flags] [trace ...]",
		Short: "Analyze GPU memory allocation traces and recommend a memory pool",
		Long: `analyze reads allocscope Arrow traces, PyTorch memory snapshots (.pickle, .gz, .xz) or RMM
logging CSV files. Its report starts with the answer: peak live, the time inside allocation
calls, the allocator the program uses today, the recommendation in its terms (a framework
setting or allocscope's pool) and what it saves against today, the anomalies that need action.
The details follow: allocation statistics per process, device and stream, anomalies (leaks,
double frees, unknown frees, failed and zero-size requests), the optimal size classes and pool
size (their rules with --explain), and a what-if simulation of allocator policies (the
recommended size-class pool, an RMM-like best-fit pool, PyTorch's caching allocator, CUDA's
stream-ordered pool, raw cudaMalloc). Several traces are analyzed together and each alone. With
no trace, the bundled PyTorch training trace is analyzed.`,
		Example: `  analyze                                     # the bundled PyTorch training trace
  analyze run.arrow                           # terminal report (100 columns): the answer first
  analyze --explain run.arrow                 # with the rules that sized the pool
  analyze --json run.arrow > report.json      # every number
  analyze --html report.html run.arrow        # one offline page with charts
  analyze -q --emit-config pool.json run.arrow  # the recommended pool, for replay
  analyze --capacity 80GiB run.arrow          # simulate the policies within 80 GiB
  analyze snapshot.pickle.gz rank*.arrow      # PyTorch snapshots, RMM CSV, several files at once
  analyze --compare before.arrow after.arrow  # a program without and with record --pool
  analyze --pool-headroom 4 --emit-config pool.json run.arrow  # for record --pool
  PYTORCH_CUDA_ALLOC_CONF=$(analyze --pytorch-conf snapshot.pickle) python train.py`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(opt, args, stdout, stderr)
		},
	}
	f := cmd.Flags()
	command.BytesVar(f, &opt.capacity, "capacity", 0,
		"device memory the simulated policies may hold: 81920, 512MiB, 80GiB, 1.5GB (default unbounded)")
	command.BytesVar(f, &opt.memory, "memory", analysis.DefaultMemoryBytes,
		"memory the decoded requests of the traces may hold; the rest is spilled to $TMPDIR (0: all of it)")
	f.BoolVar(&opt.json, "json", false, "print the report as JSON instead of text")
	f.BoolVar(&opt.explain, "explain", false, "add to the text report the rules that chose the size classes, the "+
		"large-request threshold and the arena")
	f.StringVar(&opt.html, "html", "", "also write a self-contained HTML report with charts to `FILE` (-: standard output, with -q)")
	f.StringVar(&opt.emitConfig, "emit-config", "", "write the recommended pool configuration to `FILE` (pool.json; -: standard output, with -q)")
	f.IntVar(&opt.top, "top", 10, "number of most frequent sizes to list")
	f.IntVar(&opt.k, "k", 0, "force the number of size classes (default: chosen by the k rule)")
	f.StringVar(&opt.arena, "arena", "auto", "the recommended pool's large-block arena: auto (one region, which replay, "+
		"record --pool and the Go library all run; a paged arena is named beside it when one region would pass "+
		"1.05 x peak live and the paged one meets it with at most one page operation per 500 requests), fixed "+
		"(one region, no paged arena simulated) or paged (paged whenever one region would pass 1.05 x peak live "+
		"and the paged one meets it; replay and the Go library run it, record --pool does not)")
	f.Float64Var(&opt.headroom, "pool-headroom", 1, "multiply the recommended pool's class slots and arena by `F` (>= 1): "+
		"room for blocks freed by cudaFree under record --pool, which waits for a synchronization "+
		"before reusing them; more room, fewer synchronizations of its own (the report predicts them)")
	f.BoolVar(&opt.torchConf, "pytorch-conf", false, "print only the best PYTORCH_CUDA_ALLOC_CONF value of the search "+
		"(an empty line when PyTorch's defaults are best); exit 1 when no setting fits --capacity, or when the trace "+
		"holds a framework allocator's segments instead of its requests (a recording of driver calls only)")
	f.BoolVar(&opt.compare, "compare", false, "compare two recordings of a program (e.g. without and with record --pool): "+
		"time inside its allocation calls, calls the pool served, wall time, peak live")
	f.BoolVarP(&opt.quiet, "quiet", "q", false, "print no report and no progress (use with --html, --emit-config)")
	f.BoolVar(&opt.progress, "progress", false, "show progress on stderr even when it is not a terminal")
	command.Setup(cmd, stdout, stderr)
	return cmd
}

func run(opt options, args []string, stdout, stderr io.Writer) error {
	if opt.compare {
		return compare(opt, args, stdout)
	}
	if opt.top < 0 || opt.k < 0 {
		return command.Usagef("--top and --k must not be negative")
	}
	if !(opt.headroom >= 1 && opt.headroom <= 1024) {
		return command.Usagef("--pool-headroom must be between 1 and 1024, got %g", opt.headroom)
	}
	arena, err := arenaChoice(opt.arena)
	if err != nil {
		return command.Usage(err)
	}
	if err := checkOutputs(opt); err != nil {
		return err
	}
	inputs := make([]analysis.Input, len(args))
	for i, path := range args {
		inputs[i] = analysis.Input{Name: path, Open: func() (analysis.Source, error) { return trace.Open(path) }}
	}
	if len(args) == 0 {
		inputs = []analysis.Input{bundledInput()}
	}
	bar := newProgress(stderr, !opt.quiet && (opt.progress || command.IsTerminal(stderr)))
	rep, err := analysis.Analyze(inputs, analysis.Options{Capacity: opt.capacity, Top: opt.top, K: opt.k,
		Arena: arena, PoolHeadroom: opt.headroom, PyTorchSearch: opt.torchConf, Detail: opt.html != "",
		MemoryBytes: max(opt.memory, 1), Progress: bar.update}) // 1 byte holds no chunk of the log
	bar.finish()
	if err != nil {
		return err
	}
	return write(opt, rep, stdout)
}

// checkOutputs fails, before the analysis runs, when --html or --emit-config names a file that
// cannot be written (outfile.Check), or when standard output (-) would carry two things.
func checkOutputs(opt options) error {
	reportOnStdout := opt.torchConf || !opt.quiet
	onStdout := ""
	for _, out := range []struct{ flag, path string }{{"--html", opt.html}, {"--emit-config", opt.emitConfig}} {
		switch {
		case out.path == outfile.Stdout && onStdout != "":
			return command.Usagef("%s - and %s - cannot both write standard output", onStdout, out.flag)
		case out.path == outfile.Stdout && reportOnStdout:
			return command.Usagef("%s -: standard output also carries the report; add -q", out.flag)
		case out.path == outfile.Stdout:
			onStdout = out.flag
		case out.path != "":
			if err := outfile.Check(out.path); err != nil {
				return fmt.Errorf("%s: %w", out.flag, err)
			}
		}
	}
	return nil
}

// arenaChoice parses --arena.
func arenaChoice(s string) (analysis.ArenaChoice, error) {
	switch c := analysis.ArenaChoice(s); c {
	case "auto":
		return analysis.ArenaAuto, nil
	case analysis.ArenaFixed, analysis.ArenaPaged:
		return c, nil
	}
	return "", fmt.Errorf("--arena: %q is not one of auto, fixed, paged", s)
}

// write prints the report and writes the requested files.
func write(opt options, rep *analysis.Report, stdout io.Writer) error {
	switch {
	case opt.torchConf:
		conf, err := analysis.PyTorchConf(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, conf)
	case opt.quiet:
	case opt.json:
		if err := analysis.WriteJSON(stdout, rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	default:
		if err := analysis.WriteTextWith(stdout, rep, analysis.TextOptions{Explain: opt.explain}); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	if opt.html != "" {
		if err := writeOutput(opt.html, stdout, func(w io.Writer) error { return analysis.WriteHTML(w, rep) }); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	if opt.emitConfig != "" {
		if err := analysis.CheckFits(rep, opt.capacity); err != nil {
			return fmt.Errorf("--emit-config %s not written: %w", opt.emitConfig, err)
		}
		if err := writeOutput(opt.emitConfig, stdout, configWriter(analysis.Config(rep))); err != nil {
			return fmt.Errorf("--emit-config: %w", err)
		}
	}
	return nil
}

// writeOutput writes what produce writes to path (outfile.Write), or to stdout when path is -.
func writeOutput(path string, stdout io.Writer, produce func(io.Writer) error) error {
	if path == outfile.Stdout {
		return produce(stdout)
	}
	return outfile.Write(path, outfile.Mode, produce)
}

// configWriter returns a producer of cfg as pool.json: validated, indented JSON and a newline, as
// pool.Config.Save writes it.
func configWriter(cfg *pool.Config) func(io.Writer) error {
	return func(w io.Writer) error {
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("pool configuration: %w", err)
		}
		data, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return fmt.Errorf("pool configuration: %w", err)
		}
		_, err = w.Write(append(data, '\n'))
		return err
	}
}

// compare is analyze --compare BEFORE AFTER.
func compare(opt options, args []string, stdout io.Writer) error {
	if len(args) != 2 {
		return command.Usagef("--compare takes two traces (before and after), got %d", len(args))
	}
	var runs [2]analysis.Run
	for i, path := range args {
		src, err := trace.Open(path)
		if err != nil {
			return err
		}
		runs[i], err = analysis.Measure(path, src)
		src.Close()
		if err != nil {
			return err
		}
		if runs[i].Pool, err = poolactivity.Decode(src.Info().Pool); err != nil {
			return fmt.Errorf(`%s: schema metadata "allocscope.pool": %w`, path, err)
		}
	}
	if opt.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]analysis.Run{"before": runs[0], "after": runs[1]})
	}
	return analysis.WriteComparison(stdout, runs[0], runs[1])
}
