package requests

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// On a full disk (a file size limit of 2 MiB stands in for it), a spill fails with the write's
// error, named, and every later Append and Finish return it: nothing is lost silently.
func TestLogSpillOnAFullDisk(t *testing.T) {
	if dir := os.Getenv("LOG_FULL_DISK_DIR"); dir != "" {
		signal.Ignore(syscall.SIGXFSZ) // a write past the limit fails with EFBIG instead
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 2 << 20, Max: 2 << 20}); err != nil {
			t.Fatal(err)
		}
		if os.Getenv("LOG_FULL_DISK_DECODE") != "" { // the decoder appends on a goroutine of its own
			_, _, err := Decode(&eventSlice{events: mixedEvents(8*logChunkOps, 0)}, NewBudget(0), dir)
			fmt.Printf("decode: %v\n", err)
			return
		}
		l := NewLog(NewBudget(0), dir, true)
		ops, _ := logOps(logChunkOps)
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			err = l.Append(ops, nil)
		}
		fmt.Printf("spilled %d bytes; append: %v; finish: %v\n", l.SpilledBytes(), err, l.Finish(nil, 0))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLogSpillOnAFullDisk$")
	cmd.Env = append(os.Environ(), "LOG_FULL_DISK_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 1,310,720 bytes a chunk: one fits in 2 MiB, the second write of ops fails.
	want := "spilled 1310720 bytes; append: spill the request stream to "
	if !strings.HasPrefix(string(out), want) || strings.Count(string(out), "file too large") != 2 {
		t.Errorf("got %q, want it to start %q and name the error twice", out, want)
	}
	cmd = exec.Command(os.Args[0], "-test.run", "^TestLogSpillOnAFullDisk$")
	cmd.Env = append(os.Environ(), "LOG_FULL_DISK_DIR="+t.TempDir(), "LOG_FULL_DISK_DECODE=1")
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "decode: spill the request stream to "; !strings.HasPrefix(string(out), want) ||
		!strings.Contains(string(out), "file too large") {
		t.Errorf("decoding: got %q, want it to start %q and name the error", out, want)
	}
}
