package record

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
	"github.com/allocscope/allocscope/internal/version"
)

// `record shim -o PATH` writes a shared library that works as --shim: a program run with it
// preloaded logs its events.
func TestShimCommand(t *testing.T) {
	env := testcuda.Build(t)
	lib := tempPath(t, "liballocscope-copy.so")
	code, stdout, stderr := runMain(t, "shim", "-o", lib)
	if code != 0 || stdout != "wrote "+lib+"\n" || stderr != "" {
		t.Fatalf("shim: exit code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", lib, err)
	}
	if f.Type != elf.ET_DYN {
		t.Errorf("%s: ELF type %v, want a shared object", lib, f.Type)
	}
	f.Close()
	out := tempPath(t, "out.arrow")
	if code, _, _ := runMain(t, "-q", "-o", out, "--shim", lib, "--", env.Prog("plain")); code != 7 {
		t.Errorf("record with the built shim: exit code %d, want 7", code)
	}
	events, _ := testcuda.ReadTrace(t, out)
	testcuda.CheckEvents(t, events, testcuda.PlainEvents)

	code, _, stderr = runMain(t, "shim")
	if want := "record: -o PATH is required\nRun 'record shim --help' for usage.\n"; code != 2 || stderr != want {
		t.Errorf("shim without -o: exit code %d, stderr %q; want 2, %q", code, stderr, want)
	}
}

// Wrong command lines: exit 2, one line naming the problem and one naming the --help to read; the
// program is not run (it would create a marker file).
func TestUsageErrors(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	prog := []string{"--", "sh", "-c", "echo ran > " + marker}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no args", nil, "record: no program given (record [flags] -- program [args...])\nRun 'record --help' for usage.\n"},
		{"no program", []string{"-o", "out.arrow", "--"},
			"record: no program given (record [flags] -- program [args...])\nRun 'record --help' for usage.\n"},
		{"unknown flag", append([]string{"--bogus"}, prog...), "record: unknown flag: --bogus\nRun 'record --help' for usage.\n"},
		{"bad duration", append([]string{"--wait", "soon"}, prog...),
			"record: --wait: \"soon\" is not a duration (examples: 500ms, 10s, 2m)\nRun 'record --help' for usage.\n"},
		{"negative wait", append([]string{"--wait", "-5s"}, prog...),
			"record: --wait: -5s is negative (0: do not wait)\nRun 'record --help' for usage.\n"},
		{"trace to stdout", append([]string{"-o", "-"}, prog...),
			"record: -o -: the trace is written to a file only (standard output carries the program's output); " +
				"name a file (./- for one called -)\nRun 'record --help' for usage.\n"},
		{"flag without value", []string{"-o"}, "record: flag needs an argument: 'o' in -o\nRun 'record --help' for usage.\n"},
		{"convert without a directory", []string{"convert"},
			"record: accepts 1 arg(s), received 0\nRun 'record convert --help' for usage.\n"},
		{"convert with two directories", []string{"convert", "a.raw", "b.raw"},
			"record: accepts 1 arg(s), received 2\nRun 'record convert --help' for usage.\n"},
		{"convert unknown flag", []string{"convert", "--bogus", "a.raw"},
			"record: unknown flag: --bogus\nRun 'record convert --help' for usage.\n"},
		{"shim with an argument", []string{"shim", "-o", "x.so", "extra"},
			"record: unknown command \"extra\" for \"record shim\"\nRun 'record shim --help' for usage.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			if code != 2 || stdout != "" || stderr != tc.want {
				t.Errorf("exit code %d, stdout %q, stderr %q; want 2, nothing, %q", code, stdout, stderr, tc.want)
			}
			notExist(t, marker)
		})
	}
}

// --version prints "record <version>" on stdout and exits 0; --help has examples.
func TestVersionAndHelp(t *testing.T) {
	code, stdout, stderr := runMain(t, "--version")
	if want := "record " + version.Version + "\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("--version: exit code %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
	}
	for _, args := range [][]string{{"--help"}, {"convert", "--help"}, {"shim", "--help"}} {
		code, stdout, _ := runMain(t, args...)
		if code != 0 || !strings.Contains(stdout, "\nExamples:\n  record ") {
			t.Errorf("%v: exit code %d, want 0 and an Examples section:\n%s", args, code, stdout)
		}
	}
}

// Bad runs: one line naming the problem, exit 1, and the program is not run (it would create a
// marker file), no trace and no raw log directory are left behind.
func TestRunErrors(t *testing.T) {
	env := testcuda.Build(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	prog := []string{"sh", "-c", "echo ran > " + marker}
	file := filepath.Join(dir, "file")
	writeFile(t, file, []byte("a file, not a directory"))
	busy := filepath.Join(dir, "busy.arrow")
	earlier := filepath.Join(mkdir(t, busy+".raw"), "5-6.alog")
	writeFile(t, earlier, nil)
	out := filepath.Join(dir, "out.arrow")
	shim := []string{"--shim", env.Shim}
	noABI := filepath.Join(dir, "libother.so")
	writeFile(t, noABI+".c", []byte("int other_symbol;\n"))
	if msg, err := exec.Command("cc", "-shared", "-fPIC", "-o", noABI, noABI+".c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, msg)
	}
	tests := []struct {
		name string
		args []string
		err  string
	}{
		{"missing program", append([]string{"-o", out, "--shim", env.Shim, "--", "/nonexistent"}, prog[1:]...),
			"program /nonexistent: no such file or directory"},
		{"program not in PATH", []string{"-o", out, "--", "allocscope-no-such-program"},
			"program allocscope-no-such-program: executable file not found in $PATH"},
		{"unwritable output directory", slices.Concat([]string{"-o", filepath.Join(file, "out.arrow")}, shim, []string{"--"}, prog),
			"trace: " + file + "/out.arrow: " + file + " is a regular file, not a directory"},
		{"output a device", slices.Concat([]string{"-o", "/dev/full"}, shim, []string{"--"}, prog),
			"trace: /dev/full is a character device, not a regular file"},
		{"output a directory", slices.Concat([]string{"-o", dir}, shim, []string{"--"}, prog),
			"trace: " + dir + " is a directory, not a regular file"},
		{"unusable log directory", slices.Concat([]string{"-o", out, "--log-dir", file}, shim, []string{"--"}, prog),
			"prepare raw log directory: create log directory " + file + ": mkdir " + file + ": not a directory"},
		{"log directory with earlier logs", slices.Concat([]string{"-o", busy}, shim, []string{"--"}, prog),
			"raw log directory " + busy + ".raw already holds 1 raw log(s) of an earlier run: convert them with `record convert " +
				busy + ".raw` (which removes them once converted) or remove them"},
		{"missing shim", slices.Concat([]string{"-o", out, "--shim", filepath.Join(dir, "none.so"), "--"}, prog),
			"shim: stat " + filepath.Join(dir, "none.so") + ": no such file or directory"},
		{"shim not an ELF file", slices.Concat([]string{"-o", out, "--shim", file, "--"}, prog),
			"shim " + file + ": not an allocscope shim: not an ELF file"},
		{"shim a directory", slices.Concat([]string{"-o", out, "--shim", dir, "--"}, prog),
			"shim " + dir + ": not an allocscope shim: a directory"},
		{"shim without the ABI symbol", slices.Concat([]string{"-o", out, "--shim", noABI, "--"}, prog),
			"shim " + noABI + ": not an allocscope shim (no symbol allocscope_shim_abi_2; built by another allocscope version?)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			if code != 1 || stdout != "" {
				t.Errorf("exit code %d, stdout %q; want 1 and nothing", code, stdout)
			}
			oneLineError(t, stderr, tc.err)
			notExist(t, marker)
			notExist(t, out)
			notExist(t, out+".raw")
			if _, err := os.Stat(earlier); err != nil {
				t.Errorf("earlier raw log: %v", err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A program that makes no intercepted call: its exit code, an empty trace, and a warning.
func TestNoIntercepted(t *testing.T) {
	env := testcuda.Build(t)
	out := tempPath(t, "sh.arrow")
	code, stdout, stderr := runMain(t, "-o", out, "--shim", env.Shim, "--", "sh", "-c", "echo hello $0; exit 3", "arg0")
	if code != 3 || stdout != "hello arg0\n" {
		t.Errorf("exit code %d, stdout %q; want 3 and hello arg0", code, stdout)
	}
	lines := strings.SplitAfter(stderr, "\n")
	if len(lines) != 5 || lines[0] != "allocscope: 0 events from 0 process(es), device(s) none, peak live 0 B\n" ||
		lines[2] != "allocscope: warning: "+out+".raw: the program made no intercepted call\n" ||
		lines[3] != "allocscope: wrote "+out+"\n" {
		t.Errorf("stderr:\n%s", stderr)
	}
	events, info := testcuda.ReadTrace(t, out)
	if len(events) != 0 || !slices.Equal(info.Command, []string{"sh", "-c", "echo hello $0; exit 3", "arg0"}) {
		t.Errorf("%d events, command %q", len(events), info.Command)
	}
}

// --log-dir pointing at an existing directory: record removes the raw logs it wrote there and
// nothing else; -q prints no summary.
func TestLogDirKeepsOtherFiles(t *testing.T) {
	env := testcuda.Build(t)
	logDir := t.TempDir()
	other := filepath.Join(logDir, "notes.txt")
	writeFile(t, other, []byte("mine"))
	out := tempPath(t, "out.arrow")
	code, _, stderr := runMain(t, "-q", "-o", out, "--log-dir", logDir, "--shim", env.Shim, "--", env.Prog("cupy_style"))
	if code != 13 || stderr != "" {
		t.Errorf("exit code %d, stderr %q; want 13 and no summary (-q)", code, stderr)
	}
	entries, err := os.ReadDir(logDir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "notes.txt" {
		t.Errorf("log dir holds %v (%v), want only notes.txt", entries, err)
	}
	events, _ := testcuda.ReadTrace(t, out)
	testcuda.CheckEvents(t, events, testcuda.CupyStyleEvents)
}

func TestPreloadValue(t *testing.T) {
	const lib = "/cache/liballocscope.so"
	tests := []struct{ existing, want string }{
		{"", lib},
		{"  ", lib},
		{"/usr/lib/libjemalloc.so", "/usr/lib/libjemalloc.so:" + lib},
		{"/a.so:/b.so", "/a.so:/b.so:" + lib},
		{" /a.so /b.so ", "/a.so /b.so:" + lib},
	}
	for _, tc := range tests {
		if got := preloadValue(tc.existing, lib); got != tc.want {
			t.Errorf("preloadValue(%q) = %q, want %q", tc.existing, got, tc.want)
		}
	}
}

// A library already on LD_PRELOAD still loads next to the shim (both are mapped in the program),
// and the shim still records every event of a program that reaches the driver by dlsym.
func TestExistingPreloadStillLoads(t *testing.T) {
	env := testcuda.Build(t)
	cudart := filepath.Join(env.LibDir, "libcudart.so")
	t.Setenv("LD_PRELOAD", cudart)
	code, stdout, _ := runMain(t, "-q", "-o", tempPath(t, "cat.arrow"), "--shim", env.Shim, "--", "cat", "/proc/self/maps")
	if code != 0 || !strings.Contains(stdout, " "+cudart+"\n") || !strings.Contains(stdout, " "+env.Shim+"\n") {
		t.Errorf("exit code %d; want 0 and both %s and %s mapped:\n%s", code, cudart, env.Shim, stdout)
	}
	out := tempPath(t, "cupy.arrow")
	plain := env.Run(t, "", "cupy_style") // LD_PRELOAD=libcudart.so alone, no shim
	code, stdout, _ = runMain(t, "-q", "-o", out, "--shim", env.Shim, "--", env.Prog("cupy_style"))
	if code != 13 || stdout != plain.Stdout || !strings.Contains(stdout, "cudaMalloc visible") {
		t.Errorf("cupy_style: exit code %d, want 13; stdout with the shim:\n%s\nwithout:\n%s", code, stdout, plain.Stdout)
	}
	events, _ := testcuda.ReadTrace(t, out)
	testcuda.CheckEvents(t, events, testcuda.CupyStyleEvents)
}

// The driver version and GPU names come from /proc/driver/nvidia, GPUs in bus order.
func TestNvidiaInfo(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "version"), []byte(
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Jan 13 10:01:02 UTC 2026\n"+
			"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"))
	gpu := func(bus, model string) {
		writeFile(t, filepath.Join(mkdir(t, filepath.Join(root, "gpus", bus)), "information"), []byte(
			"Model: \t\t NVIDIA "+model+"\nIRQ:   \t\t 16\nGPU UUID: \t GPU-0c1f\nBus Location: \t "+bus+"\n"))
	}
	gpu("0000:1b:00.0", "H100 80GB HBM3")
	gpu("0000:0a:00.0", "H200")
	driver, gpus := nvidiaInfo(root)
	if driver != "580.159.04" || !slices.Equal(gpus, []string{"NVIDIA H200", "NVIDIA H100 80GB HBM3"}) {
		t.Errorf("nvidiaInfo = %q, %q; want 580.159.04, [NVIDIA H200 NVIDIA H100 80GB HBM3]", driver, gpus)
	}
	driver, gpus = nvidiaInfo(filepath.Join(root, "missing"))
	if driver != "" || gpus != nil {
		t.Errorf("nvidiaInfo of a missing tree = %q, %q; want nothing", driver, gpus)
	}
}

// The progress bar appears only when converting at least progressThreshold events.
func TestProgressThreshold(t *testing.T) {
	var below, above bytes.Buffer
	progress, finish := newProgress(&below)
	progress(0, progressThreshold-1)
	progress(progressThreshold-1, progressThreshold-1)
	finish()
	if below.Len() != 0 {
		t.Errorf("below the threshold: wrote %q, want nothing", below.String())
	}
	progress, finish = newProgress(&above)
	progress(0, progressThreshold)
	progress(progressThreshold, progressThreshold)
	finish()
	if !strings.Contains(above.String(), "converting") {
		t.Errorf("at the threshold: wrote %q, want a bar named converting", above.String())
	}
}
