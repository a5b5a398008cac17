// Package record implements the `record` command: it runs a program with allocscope's LD_PRELOAD
// shim, forwards signals to it, exits with its exit code, and merges the shim's per-process raw logs
// into one Arrow trace.
package record

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/intercept"
)

// Main runs the record command with args and returns the process exit code: the traced program's,
// 2 for a wrong command line, 1 when record itself failed.
func Main(args []string, stdout, stderr io.Writer) int {
	return command.Execute(NewCommand(stdout, stderr), args)
}

// options are the flags of the main record command.
type options struct {
	output  string
	shim    string
	logDir  string
	keepRaw bool
	quiet   bool
	wait    time.Duration
	pool    string // pool.json to serve the program's allocations from
	spec    string // its intercept.PoolSpec, once checked
	// noFramework turns off the Python hook that captures PyTorch's and CuPy's own allocator requests.
	noFramework bool
	pythonHook  string // the directory holding the Python hook, put first on PYTHONPATH; "" for none
}

// NewCommand returns the cobra command `record` with its subcommands `convert` and `shim`.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	var opt options
	cmd := &cobra.Command{
		Use:   "record [flags] -- program [args...]",
		Short: "Record every GPU memory allocation of a program into an Arrow trace",
		Long: `record runs program with allocscope's LD_PRELOAD shim, which logs every CUDA device-memory
allocation and free (runtime and driver API, however the program resolves them) into per-process raw
logs. When the program ends, record waits a while (--wait) for the processes it started that still
run, merges the logs into one Arrow IPC trace and prints a summary. record exits with the program's
exit code (128+N when a signal N ended it), warnings or not.`,
		Example: `  record -o run.arrow -- python train.py
  record -- ./my_cuda_service --flag          # writes allocscope-<date>-<time>.arrow
  record -q --wait 0 -o run.arrow -- ./job    # no summary, no waiting for daemonized children
  record convert run.arrow.raw -o run.arrow   # raw logs left behind by a killed record`,
		Args: requireProgram,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecord(opt, args, stdout, stderr)
		},
	}
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	f.StringVarP(&opt.output, "output", "o", "", "trace file to write (default allocscope-<date>-<time>.arrow)")
	f.StringVar(&opt.shim, "shim", "", "use this prebuilt shim library instead of compiling the embedded one")
	f.StringVar(&opt.logDir, "log-dir", "", "directory for the raw per-process logs (default <output>.raw)")
	f.BoolVar(&opt.keepRaw, "keep-raw", false, "keep the raw logs after converting them")
	f.BoolVarP(&opt.quiet, "quiet", "q", false,
		"print nothing but errors and warnings about events lost or not recorded (no summary, no progress bar)")
	f.StringVar(&opt.pool, "pool", "", "serve the program's cudaMalloc/cuMemAlloc and their frees from the pool this "+
		"pool.json describes (analyze --emit-config), as the recorded trace shows; see docs/record-pool.md")
	f.DurationVar(&opt.wait, "wait", 10*time.Second, "after the program exits, wait up to this long for the "+
		"processes it started that still run and hold a raw log (so that the trace has all their events); 0: do not wait")
	f.BoolVar(&opt.noFramework, "no-framework", false, "do not capture PyTorch's memory history and CuPy's pool "+
		"requests in the program's Python processes (see docs/compatibility.md)")
	cmd.AddCommand(newConvertCommand(stderr), newShimCommand(stdout))
	command.Setup(cmd, stdout, stderr)
	return cmd
}

// requireProgram is record's argument check: a program to run.
func requireProgram(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return errors.New("no program given (record [flags] -- program [args...])")
	}
	return nil
}

// defaultOutput names the trace after the current local time.
func defaultOutput(now time.Time) string {
	return "allocscope-" + now.Format("20060102-150405") + ".arrow"
}

// shimPath returns the shim library to preload: the --shim one, or the embedded source compiled
// into the cache. Either must pass intercept.CheckShim: ld.so silently skips a library it cannot
// use, and the trace would be empty.
func shimPath(flag string) (string, error) {
	if flag != "" {
		abs, err := filepath.Abs(flag)
		if err != nil {
			return "", fmt.Errorf("shim %s: %w", flag, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("shim: %w", err)
		}
		return abs, intercept.CheckShim(abs)
	}
	cache, err := intercept.DefaultCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate shim cache: %w", err)
	}
	path, err := intercept.EnsureShim(cache)
	if err != nil {
		return "", fmt.Errorf("build shim (use --shim PATH on machines without a C compiler): %w", err)
	}
	return path, intercept.CheckShim(path)
}

// preloadValue appends lib to an existing LD_PRELOAD value.
func preloadValue(existing, lib string) string {
	existing = strings.TrimSpace(existing)
	if existing == "" {
		return lib
	}
	return existing + ":" + lib
}
