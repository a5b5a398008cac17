package intercept

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LiveLog is a raw log whose process is still running.
type LiveLog struct {
	Path string // the raw log file
	PID  int    // the process id in its name <pid>-<start_ns>.alog; 0 when the name holds none
}

// LiveLogs returns the raw logs (*.alog) of dir that a live process still writes, sorted by path.
//
// Every process that loads the shim holds a shared flock on its own raw log from start-up until it
// exits (the kernel drops it at death, SIGKILL included, and at exec, after which the new image locks
// its new log). A log is live when an exclusive lock on it cannot be taken; when it can, the lock is
// dropped at once. A child forked without exec shares its parent's lock, so it keeps the parent's
// log live too.
func LiveLogs(dir string) ([]LiveLog, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("list live raw logs: %w", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.alog"))
	if err != nil {
		return nil, fmt.Errorf("list live raw logs in %s: %w", dir, err)
	}
	sort.Strings(paths)
	var live []LiveLog
	for _, p := range paths {
		held, err := lockHeld(p)
		if err != nil {
			return nil, err
		}
		if held {
			live = append(live, LiveLog{Path: p, PID: logPID(p)})
		}
	}
	return live, nil
}

// lockHeld reports whether another open file holds a flock on path. A file removed meanwhile is not
// held.
func lockHeld(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check raw log lock: %w", err)
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("check raw log lock %s: %w", path, err)
	}
}

// logPID parses the process id out of a raw log name <pid>-<start_ns>.alog; 0 when there is none.
func logPID(path string) int {
	prefix, _, ok := strings.Cut(filepath.Base(path), "-")
	if !ok {
		return 0
	}
	pid, err := strconv.Atoi(prefix)
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
