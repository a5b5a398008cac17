// Package benchutil reports benchmark throughput per second of wall time and per second of the
// process's CPU time, since a shared machine's wall time says little about the code.
package benchutil

import (
	"syscall"
	"testing"
	"time"
)

// CPU returns the process's user plus system CPU time so far.
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report adds Mevents/s (wall) and Mevents/cpu-s metrics for events processed per iteration,
// cpu being the CPU time the benchmark's iterations used.
func Report(b *testing.B, events uint64, cpu time.Duration) {
	total := float64(events) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds()/1e6, "Mevents/s")
	if cpu > 0 {
		b.ReportMetric(total/cpu.Seconds()/1e6, "Mevents/cpu-s")
	}
}
