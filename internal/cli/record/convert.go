package record

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/intercept"
	"github.com/allocscope/allocscope/internal/outfile"
	"github.com/allocscope/allocscope/internal/progress"
	"github.com/allocscope/allocscope/internal/version"
	"github.com/allocscope/allocscope/trace"
)

// progressThreshold is the number of events above which conversion shows a progress bar.
const progressThreshold = 1 << 20

func unixTcgetpgrp(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCGPGRP) }

// newConvertCommand returns `record convert DIR -o out.arrow`, which prints its summary on stderr
// and removes the raw logs it converted unless --keep-raw is given.
func newConvertCommand(stderr io.Writer) *cobra.Command {
	var output string
	var keepRaw bool
	cmd := &cobra.Command{
		Use:   "convert DIR -o out.arrow",
		Short: "Convert raw logs left behind by a killed record into an Arrow trace",
		Long: `convert merges the raw logs in DIR, left behind by a record that was killed or whose
conversion failed, into one Arrow trace, and removes them once the trace is written (unless
--keep-raw), so that a new record into the same place starts clean.`,
		Example: `  record convert run.arrow.raw                # writes run.arrow
  record convert /tmp/logs -o run.arrow`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(args[0], output, keepRaw, stderr)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "trace file to write (default DIR without .raw, plus .arrow)")
	cmd.Flags().BoolVar(&keepRaw, "keep-raw", false, "keep the raw logs after converting them")
	return cmd
}

// runConvert converts the raw logs of dir into the trace output (default convertOutput(dir)) and
// removes them unless keepRaw.
func runConvert(dir, output string, keepRaw bool, stderr io.Writer) error {
	if output == "" {
		output = convertOutput(dir)
	}
	if err := checkTraceOutput(output); err != nil {
		return err
	}
	command, err := intercept.Command(dir)
	if err != nil {
		return err
	}
	sum, err := writeTrace(dir, output, traceInfo(command, rawStartTime(dir)), stderr)
	if err != nil {
		return err
	}
	if !keepRaw {
		removeRawLogs(dir, true) // the directory itself only when nothing else is in it
	}
	printSummary(stderr, sum, 0, output, false)
	return nil
}

// checkTraceOutput fails when the trace cannot be written at path: "-" (the Arrow trace goes to a
// file only: record's standard output is the program's) or what outfile.Check refuses.
func checkTraceOutput(path string) error {
	if path == outfile.Stdout {
		return command.Usagef("-o -: the trace is written to a file only (standard output carries the program's output); name a file (./- for one called -)")
	}
	if err := outfile.Check(path); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
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
			if err := buildShim(output); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s\n", output)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "where to write the shared library")
	return cmd
}

// shimMode is the permission of a shim library that record shim writes anew, before the umask: the
// compiler's own for a shared library.
const shimMode = 0o755

// buildShim compiles the shim in a temporary directory and writes it to output with outfile.
func buildShim(output string) error {
	switch output {
	case "":
		return command.Usagef("-o PATH is required")
	case outfile.Stdout:
		return command.Usagef("-o -: the shim library is written to a file only; name a file (./- for one called -)")
	}
	if err := outfile.Check(output); err != nil {
		return fmt.Errorf("shim: %w", err)
	}
	tmp, err := os.MkdirTemp("", "allocscope-shim-*")
	if err != nil {
		return fmt.Errorf("build shim %s: %w", output, err)
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, intercept.ShimFileName)
	if err := intercept.BuildShim(built); err != nil {
		if cause := errors.Unwrap(err); cause != nil {
			err = cause // BuildShim's message names the temporary path
		}
		return fmt.Errorf("build shim %s: %w", output, err)
	}
	lib, err := os.Open(built)
	if err != nil {
		return fmt.Errorf("build shim %s: %w", output, err)
	}
	defer lib.Close()
	return outfile.Write(output, shimMode, func(w io.Writer) error {
		_, err := io.Copy(w, lib)
		return err
	})
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

// writeTrace merges the raw logs of dir into the Arrow trace output (written by outfile: atomically,
// so that a failure leaves no truncated trace), drawing a progress bar on progress for large
// conversions (io.Discard: none).
func writeTrace(dir, output string, info trace.Info, progress io.Writer) (intercept.Summary, error) {
	var sum intercept.Summary
	err := outfile.Write(output, outfile.Mode, func(out io.Writer) error {
		var err error
		sum, err = convertDir(dir, out, output, info, progress)
		return err
	})
	return sum, err
}

// convertDir merges the raw logs of dir into an Arrow trace written to out (the trace file name),
// with a progress bar on progress.
func convertDir(dir string, out io.Writer, name string, info trace.Info, progress io.Writer) (intercept.Summary, error) {
	logs, err := intercept.OpenLogs(dir)
	if err != nil {
		return intercept.Summary{}, fmt.Errorf("convert raw logs %s: %w", dir, err)
	}
	defer logs.Close()
	info.LostEvents = logs.Lost()
	info.Pool = logs.Pool().JSON()
	info.Modules = logs.Modules()
	info.IPCExportSizes = logs.IPCExportSizes()
	fw := readFramework(dir, logs.ClockOffsets())
	info.Framework = fw.captures
	bw := bufio.NewWriterSize(out, 1<<20)
	w, err := trace.NewWriter(bw, info)
	if err != nil {
		return intercept.Summary{}, fmt.Errorf("write trace %s: %w", name, err)
	}
	bar, finish := newProgress(progress)
	sum, err := logs.Convert(w, intercept.ConvertOptions{Progress: bar, Extra: fw.events})
	finish()
	sum.Warnings = append(sum.Warnings, fw.warnings...)
	if err != nil {
		w.Close()
		return sum, fmt.Errorf("convert raw logs %s: %w", dir, err)
	}
	if err := w.Close(); err != nil {
		return sum, fmt.Errorf("write trace %s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("write trace %s: %w", name, err)
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
