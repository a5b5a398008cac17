package units

import (
	"strconv"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1000: "1000 B", 1024: "1 KiB", 1536: "1.5 KiB",
		6000: "5.9 KiB", 1000 << 10: "1000 KiB", 1023500: "999.5 KiB", 3 << 20: "3 MiB", 234870784: "224 MiB",
		239627264: "228.5 MiB", 1954545664: "1.8 GiB", 1 << 30: "1 GiB", 80 << 40: "80 TiB", 1 << 50: "1 PiB",
		1<<64 - 1: "16 EiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "81920": 81920, "512MiB": 512 << 20, "80GiB": 80 << 30,
		"1.5 GB": 1_500_000_000, "1.5GB": 1_500_000_000, "4kib": 4096, " 1GiB ": 1 << 30, "7 B": 7, "2TB": 2e12} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for bad, msg := range map[string]string{
		"-1":    `"-1" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
		"GiB":   `"GiB" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
		"1e400": `"1e400" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
		"NaN":   `"NaN" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
		"20EiB": `"20EiB" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
		"x":     `"x" is not a byte count (examples: 81920, 512MiB, 80GiB)`,
	} {
		if n, err := ParseBytes(bad); err == nil || err.Error() != msg {
			t.Errorf("ParseBytes(%q) = %d, %v; want the error %s", bad, n, err, msg)
		}
	}
}

// FuzzParseBytes: byte counts never panic, and plain integers read back as themselves.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"", "81920", "512MiB", "80GiB", "1.5 GB", "-1", "1e400", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		// Integers read back exactly up to 2^53 (float64's exact range).
		if v, perr := strconv.ParseUint(s, 10, 64); perr == nil && v <= 1<<53 && (err != nil || n != v) {
			t.Fatalf("ParseBytes(%q) = %d, %v; want %d", s, n, err, v)
		}
	})
}

func TestFormatCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{950, "950"}, {999.6, "1000"}, {12345, "12.3 k"}, {4561000, "4.56 M"}, {1.5e9, "1.5 G"}, {0.5, "0.5"}} {
		if got := FormatRate(tc.v); got != tc.want {
			t.Errorf("FormatRate(%g) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		ns   float64
		want string
	}{
		{0, "0 ns"}, {1, "1 ns"}, {950, "950 ns"}, {999.6, "1 µs"}, {1000, "1 µs"}, {1234, "1.23 µs"},
		{78600, "78.6 µs"}, {123456, "123 µs"}, {999999, "1 ms"}, {1500000, "1.5 ms"}, {45678912, "45.7 ms"},
		{999996000, "1 s"}, {2500000000, "2.5 s"}, {224556000000, "225 s"}, {1234e9, "1234 s"},
		{-85000, "-85 µs"}, {-1234567, "-1.23 ms"},
	} {
		if got := FormatDuration(c.ns); got != c.want {
			t.Errorf("FormatDuration(%g) = %q, want %q", c.ns, got, c.want)
		}
	}
}

func TestFormatRatio(t *testing.T) {
	for r, want := range map[float64]string{2.7345: "2.73", 52.24: "52.2", 999.4: "999", 999.6: "1000", 1456.2: "1456", 0.5: "0.5"} {
		if got := FormatRatio(r); got != want {
			t.Errorf("FormatRatio(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestFormatPercent(t *testing.T) {
	for p, want := range map[float64]string{0.73495: "0.735%", 99.8075: "99.8%", 50: "50%", 2.0259: "2.03%", 100: "100%"} {
		if got := FormatPercent(p); got != want {
			t.Errorf("FormatPercent(%v) = %q, want %q", p, got, want)
		}
	}
}
