// Package units formats and parses the quantities that allocscope's commands print and accept:
// byte counts in binary units (KiB, MiB, ...) in reports, binary and decimal units (GiB, GB, ...)
// on the command line; counts, rates and durations in reports.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// binaryUnits are the units FormatBytes writes, each 1024 times the one before.
var binaryUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// FormatBytes writes n in B, KiB, MiB, ... EiB with at most one decimal, ".0" dropped: "512 B",
// "1.5 KiB", "5.9 KiB", "224 MiB", "228.5 MiB", "1.8 GiB". Counts below 1 KiB are written
// exactly: "1000 B". Every command's output writes byte counts with it (analyze, record's summary,
// replay), and the HTML report's script writes them the same way.
func FormatBytes(n uint64) string {
	v, u := float64(n), 0
	for v >= 1024 && u < len(binaryUnits)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + binaryUnits[u]
}

// threeDigits writes v with three significant digits, without switching to exponent notation
// for 1000 and above ("1.02e+03"), nor for what rounds up to 1000 ("1e+03" for 999.6).
func threeDigits(v float64) string {
	if v >= 999.5 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// parseUnits are the suffixes ParseBytes accepts (case-insensitive), longest first.
var parseUnits = []struct {
	suffix string
	mult   uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseBytes reads a byte count such as 81920, 80GiB, 1.5 GB or 512MiB: a non-negative number,
// optionally followed by a binary (KiB, MiB, GiB, TiB) or decimal (B, KB, MB, GB, TB) unit, in any
// case, with or without a space. "" is 0. A fraction of a byte is dropped.
func ParseBytes(s string) (uint64, error) {
	number := strings.TrimSpace(s)
	if number == "" {
		return 0, nil
	}
	mult := uint64(1)
	for _, u := range parseUnits {
		if strings.HasSuffix(strings.ToUpper(number), strings.ToUpper(u.suffix)) {
			number, mult = strings.TrimSpace(number[:len(number)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(number, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*float64(mult) >= math.MaxUint64 {
		return 0, fmt.Errorf("%q is not a byte count (examples: 81920, 512MiB, 80GiB)", s)
	}
	return uint64(v * float64(mult)), nil
}

// FormatCount prints n with thousands separators: 930,367.
func FormatCount(n int64) string {
	if n < 0 {
		return "-" + FormatCount(-n)
	}
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

// FormatRatio writes a ratio with three significant digits and no exponent: 2.73, 52.2, 1456.
func FormatRatio(r float64) string { return threeDigits(r) }

// FormatPercent writes a percentage with three significant digits and a percent sign: 0.735%,
// 99.8%, 50%.
func FormatPercent(p float64) string { return threeDigits(p) + "%" }

// FormatRate writes a rate per second with three significant digits and k/M/G prefixes:
// 950, 12.3 k, 4.56 M.
func FormatRate(perSecond float64) string {
	switch {
	case perSecond >= 1e9:
		return threeDigits(perSecond/1e9) + " G"
	case perSecond >= 1e6:
		return threeDigits(perSecond/1e6) + " M"
	case perSecond >= 1e3:
		return threeDigits(perSecond/1e3) + " k"
	}
	return threeDigits(perSecond)
}

// durationUnits are FormatDuration's units above the nanosecond, largest first.
var durationUnits = []struct {
	ns   float64
	name string
}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}}

// FormatDuration writes ns nanoseconds with three significant digits, a space and a unit (ns, µs,
// ms, s), the unit chosen after rounding: "950 ns", "1 µs" (for 999.6 ns), "1.23 µs", "45.7 ms",
// "2.5 s", "1234 s"; a negative duration as its magnitude with a minus sign: "-85 µs". Every
// command's output writes durations with it (analyze, record's summary, replay), and the HTML
// report's script writes them the same way.
func FormatDuration(ns float64) string {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(ns, 'g', 3, 64), 64)
	for _, u := range durationUnits {
		if rounded >= u.ns {
			return sign + threeDigits(ns/u.ns) + " " + u.name
		}
	}
	return sign + threeDigits(ns) + " ns"
}
