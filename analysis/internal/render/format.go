// Package render writes analysis reports: a terminal report that fits 100 columns, JSON, and a
// self-contained interactive HTML page whose charts the vendored uPlot draws.
package render

import "github.com/allocscope/allocscope/internal/units"

// Bytes writes n in B, KiB, MiB, GiB, ... with up to one decimal (units.FormatBytes).
func Bytes(n uint64) string { return units.FormatBytes(n) }

// Duration writes ns nanoseconds in Go's notation rounded to two decimals of its unit, a negative
// one with a minus sign (units.FormatDuration, GoRounded): "1.23µs", "45.68ms", "-85µs".
func Duration(ns float64) string { return units.FormatDuration(ns, units.GoRounded) }

// Count writes n with thousands separators.
func Count(n uint64) string { return units.FormatCount(int64(min(n, 1<<63-1))) }
