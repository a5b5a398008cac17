package record

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/intercept"
	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/progress"
	"github.com/allocscope/allocscope/internal/version"
	"github.com/allocscope/allocscope/trace"
)

// progressThreshold is the number of events above which conversion shows a progress bar.
const progressThreshold = 1 << 20

func unixTcgetpgrp(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCGPGRP) }

// newConvertCommand returns `record convert DIR -o out.arrow`, which prints its summary on stderr.
func newConvertCommand(stderr io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "convert DIR -o out.arrow",
		Short: "Convert raw logs left behind by a killed record into an Arrow trace",
		Example: `  record convert run.arrow.raw                # writes run.arrow
  record convert /tmp/logs -o run.arrow`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if output == "" {
				output = convertOutput(dir)
			}
			command, err := intercept.Command(dir)
			if err != nil {
				return err
			}
			sum, err := writeTrace(dir, output, traceInfo(command, rawStartTime(dir)), stderr)
			if err != nil {
				return err
			}
			printSummary(stderr, sum, 0, output, false)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "trace file to write (default DIR without .raw, plus .arrow)")
	return cmd
}

// newShimCommand returns `record shim -o PATH`, which builds the shim for machines without a compiler.
func newShimCommand(stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "shim -o PATH",
		Short: "Build the shim library, to copy to a machine without a C compiler (use it with --shim)",
		Example: `  record shim -o liballocscope.so
  record --shim ./liballocscope.so -o run.arrow -- ./app   # on the machine without a compiler`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return command.Usagef("-o PATH is required")
			}
			if err := intercept.BuildShim(output); err != nil {
				return err // names the output: "build shim PATH: ..."
			}
			fmt.Fprintf(stdout, "wrote %s\n", output)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "where to write the shared library")
	return cmd
}

// rawStartTime is the modification time of the raw log directory, the best start time a convert knows.
func rawStartTime(dir string) time.Time {
	if st, err := os.Stat(dir); err == nil {
		return st.ModTime()
	}
	return time.Now()
}

// convertOutput is the default trace name for the raw log directory dir: dir without a .raw suffix,
// with .arrow appended unless it ends so already.
func convertOutput(dir string) string {
	out := strings.TrimSuffix(filepath.Clean(dir), ".raw")
	if !strings.HasSuffix(out, ".arrow") {
		out += ".arrow"
	}
	return out
}

// writeTrace merges the raw logs of dir into the Arrow trace output, drawing a progress bar on
// progress for large conversions (io.Discard: none). On failure it removes what it wrote of output,
// so that no truncated trace is left behind.
func writeTrace(dir, output string, info trace.Info, progress io.Writer) (intercept.Summary, error) {
	out, err := os.Create(output)
	if err != nil {
		return intercept.Summary{}, fmt.Errorf("create trace: %w", err)
	}
	sum, err := convertDir(dir, out, info, progress)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write trace %s: %w", output, cerr)
	}
	if err != nil {
		os.Remove(output)
	}
	return sum, err
}

// convertDir merges the raw logs of dir into an Arrow trace written to out, with a progress bar on
// progress.
func convertDir(dir string, out *os.File, info trace.Info, progress io.Writer) (intercept.Summary, error) {
	logs, err := intercept.OpenLogs(dir)
	if err != nil {
		return intercept.Summary{}, fmt.Errorf("convert raw logs %s: %w", dir, err)
	}
	defer logs.Close()
	info.LostEvents = logs.Lost()
	info.Pool = logs.Pool()
	info.Modules = logs.Modules()
	bw := bufio.NewWriterSize(out, 1<<20)
	w, err := trace.NewWriter(bw, info)
	if err != nil {
		return intercept.Summary{}, fmt.Errorf("write trace %s: %w", out.Name(), err)
	}
	bar, finish := newProgress(progress)
	sum, err := logs.Convert(w, intercept.ConvertOptions{Progress: bar})
	finish()
	if err != nil {
		w.Close()
		return sum, fmt.Errorf("convert raw logs %s: %w", dir, err)
	}
	if err := w.Close(); err != nil {
		return sum, fmt.Errorf("write trace %s: %w", out.Name(), err)
	}
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("write trace %s: %w", out.Name(), err)
	}
	return sum, nil
}

// newProgress returns a Progress callback for intercept.Convert that shows a bar on w once the
// total passes progressThreshold events, and a function that finishes the bar. It draws nothing on
// io.Discard (record -q).
func newProgress(w io.Writer) (update func(done, total int64), finish func()) {
	bar := progress.New(w, w != io.Discard)
	update = func(done, total int64) {
		if total >= progressThreshold {
			bar.Update("converting", "events", done, total)
		}
	}
	return update, bar.Finish
}

// traceInfo is the metadata of a trace recorded now on this host.
func traceInfo(command []string, start time.Time) trace.Info {
	host, _ := os.Hostname()
	driver, gpus := nvidiaInfo("/proc/driver/nvidia")
	return trace.Info{
		FormatVersion:   trace.FormatVersion,
		Source:          "allocscope",
		Command:         command,
		Host:            host,
		StartTime:       start,
		RecorderVersion: version.Version,
		DriverVersion:   driver,
		GPUNames:        gpus,
	}
}

// nvidiaInfo reads the driver version and GPU names from the NVIDIA kernel driver's /proc files,
// without touching CUDA. It returns empty values where they are not there.
func nvidiaInfo(root string) (driver string, gpus []string) {
	if b, err := os.ReadFile(filepath.Join(root, "version")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if strings.Count(f, ".") >= 1 && f[0] >= '0' && f[0] <= '9' {
				driver = f
				break
			}
		}
	}
	infos, _ := filepath.Glob(filepath.Join(root, "gpus", "*", "information"))
	sort.Strings(infos)
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "Model:"); ok {
				gpus = append(gpus, strings.TrimSpace(name))
			}
		}
	}
	return driver, gpus
}
