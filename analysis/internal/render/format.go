// Package render writes analysis reports: a terminal report that fits 100 columns, JSON, and a
// self-contained HTML page with SVG charts.
package render

import (
	"fmt"
	"strings"
	"time"
)

// Bytes writes n in B, KiB, MiB, GiB or TiB with up to one decimal.
func Bytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + units[u]
}

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
func Count(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
