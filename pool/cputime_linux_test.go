package pool

import (
	"syscall"
	"time"
)

// threadCPUTime returns the CPU time the calling OS thread has used (Linux RUSAGE_THREAD), so a
// benchmark on a busy machine can report what the code costs apart from waiting for a core.
func threadCPUTime() time.Duration {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
