package record

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/allocscope/allocscope/internal/intercept"
)

// pollInterval is how often waitForLogs looks again for processes that still hold a raw log.
const pollInterval = 20 * time.Millisecond

// maxCommandLen is the number of characters of a process's command line that the waiting line shows.
const maxCommandLen = 40

// waitForLogs waits until no live process holds a raw log of dir (intercept.LiveLogs), at most
// timeout, or until stop is closed. It looks again every pollInterval, since the processes waited
// for may start others. When there are some, it writes one line naming them to notice first; when it
// stops waiting for processes still running, it writes one line to warn, since their later events
// are not in the trace. It returns the raw logs still live then (nil when none is).
func waitForLogs(dir string, timeout time.Duration, stop <-chan struct{}, notice, warn io.Writer) []intercept.LiveLog {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	w := logWait{dir: dir, timeout: timeout, poll: tick.C, deadline: deadline.C, stop: stop, notice: notice, warn: warn}
	return w.run()
}

// logWait is one wait of waitForLogs, with the channels that end it or make it look again given:
// tests drive it step by step.
type logWait struct {
	dir            string
	timeout        time.Duration    // the limit, as the lines name it
	poll, deadline <-chan time.Time // look again; give up
	stop           <-chan struct{}  // closed: give up (an interrupt)
	notice, warn   io.Writer
}

// run waits as waitForLogs does: it returns the raw logs still live when it gave up, else nil.
func (w *logWait) run() []intercept.LiveLog {
	live, err := intercept.LiveLogs(w.dir)
	if err != nil || len(live) == 0 {
		warnLiveLogs(w.warn, err)
		return nil
	}
	fmt.Fprintf(w.notice, "allocscope: waiting up to %s for %d process(es) still holding a log: %s\n",
		w.timeout, len(live), describeLogs(live, true))
	for {
		select {
		case <-w.stop:
			fmt.Fprintf(w.warn, "allocscope: stopped waiting for %s (interrupted); the trace holds their events up to now\n",
				describeLogs(live, false))
			return live
		case <-w.deadline:
			if live, err = intercept.LiveLogs(w.dir); err != nil || len(live) == 0 {
				warnLiveLogs(w.warn, err)
				return nil
			}
			fmt.Fprintf(w.warn, "allocscope: stopped waiting for %s after %s (still running); the trace holds their events up to now\n",
				describeLogs(live, false), w.timeout)
			return live
		case <-w.poll:
			if live, err = intercept.LiveLogs(w.dir); err != nil || len(live) == 0 {
				warnLiveLogs(w.warn, err)
				return nil
			}
		}
	}
}

// warnLiveLogs reports that record could not tell which processes still hold a raw log, when err
// says so.
func warnLiveLogs(w io.Writer, err error) {
	if err != nil {
		fmt.Fprintf(w, "allocscope: warning: not waiting for processes still running: %v\n", err)
	}
}

// describeLogs names the processes of live raw logs, "pid 123 (python worker.py), pid 456", with
// their command lines when withCommand is set and they can be read. A log whose name holds no pid
// is named by its file name.
func describeLogs(live []intercept.LiveLog, withCommand bool) string {
	parts := make([]string, len(live))
	for i, l := range live {
		if l.PID <= 0 {
			parts[i] = filepath.Base(l.Path)
			continue
		}
		parts[i] = "pid " + strconv.Itoa(l.PID)
		if !withCommand {
			continue
		}
		if cmd := processCommand(l.PID); cmd != "" {
			parts[i] += " (" + cmd + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// processCommand is the command line of process pid from /proc, arguments separated by spaces and
// cut to maxCommandLen characters; "" when it cannot be read.
func processCommand(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	cmd := []rune(strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
	if len(cmd) > maxCommandLen {
		return string(cmd[:maxCommandLen-3]) + "..."
	}
	return string(cmd)
}
