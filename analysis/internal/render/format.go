// Package render writes analysis reports: a terminal report that fits 100 columns, JSON, and a
// self-contained interactive HTML page whose charts the vendored uPlot draws.
package render

import (
	"time"

	"github.com/allocscope/allocscope/internal/units"
)

// Bytes writes n in B, KiB, MiB, GiB, ... with up to one decimal (units.FormatBytes).
func Bytes(n uint64) string { return units.FormatBytes(n) }

// Duration writes ns nanoseconds rounded to three significant digits.
func Duration(ns float64) string {
	d := time.Duration(ns)
	switch {
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return d.Round(10 * time.Nanosecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

// SignedDuration writes ns with a sign.
func SignedDuration(ns int64) string {
	if ns < 0 {
		return "-" + Duration(float64(-ns))
	}
	return Duration(float64(ns))
}

// Count writes n with thousands separators.
func Count(n uint64) string { return units.FormatCount(int64(min(n, 1<<63-1))) }
