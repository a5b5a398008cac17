//go:build !linux

package pool

import "time"

// threadCPUTime is not measured outside Linux.
func threadCPUTime() time.Duration { return 0 }
