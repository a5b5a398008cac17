package record

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/allocscope/allocscope/internal/testcuda"
)

// A conversion of more than progressThreshold events (bench: 2 x 600000 calls) draws a progress
// bar; with -q record prints nothing at all, bar included, and exits with the program's code.
func TestQuietSilencesProgress(t *testing.T) {
	env := testcuda.Build(t)
	for _, quiet := range []bool{false, true} {
		out := tempPath(t, "bench.arrow")
		args := []string{"-o", out, "--shim", env.Shim, "--", env.Prog("bench"), "1", "600000"}
		if quiet {
			args = append([]string{"-q"}, args...)
		}
		code, _, stderr := runMain(t, args...)
		if code != 0 {
			t.Fatalf("quiet %v: exit code %d, stderr %q", quiet, code, stderr)
		}
		switch {
		case quiet && stderr != "":
			t.Errorf("-q: stderr %q, want nothing", stderr)
		case !quiet && (!strings.Contains(stderr, "converting") ||
			!strings.Contains(stderr, "allocscope: 1,200,000 events from 1 process(es)")):
			t.Errorf("stderr %q, want a progress bar named converting and the summary", stderr)
		}
		events, _ := testcuda.ReadTrace(t, out)
		if len(events) != 1200000 {
			t.Errorf("quiet %v: %d events, want 1200000", quiet, len(events))
		}
	}
}

// newProgress on io.Discard (what -q passes) makes no bar even past the threshold.
func TestProgressDiscard(t *testing.T) {
	progress, finish := newProgress(io.Discard)
	progress(0, progressThreshold)
	progress(progressThreshold, progressThreshold)
	finish()
	var buf bytes.Buffer
	progress, finish = newProgress(&buf)
	progress(0, progressThreshold)
	finish()
	if !strings.Contains(buf.String(), "converting") {
		t.Errorf("on a buffer: wrote %q, want a bar named converting", buf.String())
	}
}

// -q keeps warnings about events not recorded: a program that made no intercepted call gets its
// exit code and the one warning line, and nothing else.
func TestQuietKeepsWarnings(t *testing.T) {
	out := tempPath(t, "sh.arrow")
	code, stdout, stderr := runMain(t, "-q", "-o", out, "--shim", dummyShim(t), "--", "sh", "-c", "echo hi; exit 3")
	want := "allocscope: warning: " + out + ".raw: no process loaded the shim (a static binary, or LD_PRELOAD removed?)\n"
	if code != 3 || stdout != "hi\n" || stderr != want {
		t.Errorf("exit code %d, stdout %q, stderr %q; want 3, hi and %q", code, stdout, stderr, want)
	}
}

// When the conversion fails (here on an empty raw log), record keeps the raw logs, says how to
// convert them, writes no trace and exits with the program's exit code, or 1 when that is 0.
func TestConversionFailureExitCode(t *testing.T) {
	shim := dummyShim(t)
	for _, tc := range []struct{ exit, want int }{{0, 1}, {6, 6}} {
		dir := t.TempDir()
		out, logDir := filepath.Join(dir, "out.arrow"), filepath.Join(dir, "logs")
		script := `: > "$ALLOCSCOPE_LOG_DIR/77-1.alog"; exit ` + strconv.Itoa(tc.exit)
		code, _, stderr := runMain(t, "-q", "-o", out, "--log-dir", logDir, "--shim", shim, "--", "sh", "-c", script)
		lines := strings.SplitAfter(stderr, "\n")
		kept := "record: raw logs kept in " + logDir + "; convert them with `record convert " + logDir + " -o " + out + "`\n"
		if code != tc.want || len(lines) != 3 || !strings.HasPrefix(lines[0], "record: ") || lines[1] != kept {
			t.Errorf("program exit %d: record exit code %d, stderr %q; want %d and the error, then %q",
				tc.exit, code, stderr, tc.want, kept)
		}
		notExist(t, out)
		if _, err := os.Stat(filepath.Join(logDir, "77-1.alog")); err != nil {
			t.Errorf("raw log not kept: %v", err)
		}
	}
}
