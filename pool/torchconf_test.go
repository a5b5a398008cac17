package pool

import (
	"strings"
	"testing"
)

// The range form fills PyTorch's 16 size buckets as its current parser does: the first entry
// also sets the buckets below it, `>` sets those above the previous entry, a bucket no entry sets
// stays 0 (512-byte rounding only), keys beyond 32 GiB land in the last bucket.
func TestRoundupDivisionTable(t *testing.T) {
	for _, c := range []struct {
		conf string
		want [roundupBuckets]uint64
	}{
		{"roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", [16]uint64{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}},
		{"roundup_power2_divisions:[64:2,1024:8]", [16]uint64{2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 8}},
		{"roundup_power2_divisions:[>:4]", [16]uint64{0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
		{"roundup_power2_divisions:[65536:4]", [16]uint64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
		{"roundup_power2_divisions:8", [16]uint64{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}},
	} {
		p, err := ParseAllocConf(c.conf)
		if err != nil {
			t.Fatalf("%s: %v", c.conf, err)
		}
		if got := p.divisionTable(); got != c.want {
			t.Errorf("%s: table %v, want %v", c.conf, got, c.want)
		}
	}
	for _, c := range [][2]uint64{{1, 0}, {2<<20 - 1, 0}, {2 << 20, 1}, {300 << 20, 8}, {1 << 40, 15}} {
		if got := roundupBucket(c[0]); got != int(c[1]) {
			t.Errorf("roundupBucket(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// ParseAllocConf reads what AllocConf writes, ignores spaces and options that do not place device
// memory, and refuses what PyTorch refuses or the model does not know, naming the option.
func TestParseAllocConf(t *testing.T) {
	const full = "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.8,expandable_segments:True"
	p, err := ParseAllocConf(full)
	want := PyTorchConfig{MaxSplitSizeMB: 64, GarbageCollectionThreshold: 0.8, ExpandableSegments: true,
		RoundupPower2Ranges: []RoundupRange{{256, 1}, {512, 2}, {0, 8}}}
	if err != nil || p.AllocConf() != full || p.MaxSplitSizeMB != 64 || p.GarbageCollectionThreshold != 0.8 ||
		!p.ExpandableSegments || len(p.RoundupPower2Ranges) != 3 || p.RoundupPower2Ranges[2] != want.RoundupPower2Ranges[2] {
		t.Errorf("ParseAllocConf(%q) = %+v, %v; writes back %q", full, p, err, p.AllocConf())
	}
	p, err = ParseAllocConf(" expandable_segments : False , roundup_power2_divisions:4,release_lock_on_cudamalloc:True,backend:native")
	if err != nil || p.AllocConf() != "roundup_power2_divisions:4" {
		t.Errorf("spaces and ignored options: %+v, %v", p, err)
	}
	if p, err := ParseAllocConf(""); err != nil || p.AllocConf() != "" {
		t.Errorf("empty: %+v, %v", p, err)
	}
	for conf, msg := range map[string]string{
		"max_split_size_mb:10":               "max_split_size_mb: 10 is below PyTorch's minimum of 20",
		"garbage_collection_threshold:1.0":   "garbage_collection_threshold: 1 is not in (0, 1)",
		"roundup_power2_divisions:3":         "roundup_power2_divisions: 3 is not a power of two",
		"roundup_power2_divisions:0":         "roundup_power2_divisions: 0 is not a power of two",
		"roundup_power2_divisions:[300:2]":   "roundup_power2_ranges[0].size_mb: 300 is not a power of two",
		"roundup_power2_divisions:[256:3]":   "roundup_power2_ranges[0].divisions: 3 is not 0 or a power of two up to 1048576",
		"roundup_power2_divisions:[256:2":    `roundup_power2_divisions: "[256:2" is not a list [size_mb:divisions,...]`,
		"roundup_power2_divisions:[256,>:2]": `roundup_power2_divisions: entry "256" is not size_mb:divisions or >:divisions`,
		"backend:cudaMallocAsync":            "backend: cudaMallocAsync is not the caching allocator (PolicyStreamOrdered models it)",
		"max_non_split_rounding_mb:40":       `max_non_split_rounding_mb: "max_non_split_rounding_mb:40" is not an option the model knows`,
		"expandable_segments":                `option "expandable_segments" has no value`,
	} {
		_, err := ParseAllocConf(conf)
		if want := "parse " + `"` + conf + `"` + ": " + msg; err == nil || err.Error() != want {
			t.Errorf("ParseAllocConf(%q) = %v, want %q", conf, err, want)
		}
	}
	if n := len(SplitAllocConf("max_split_size_mb:64, roundup_power2_divisions:[1:2,>:4],expandable_segments:True")); n != 3 {
		t.Errorf("SplitAllocConf: %d options, want 3", n)
	}
}

// pool.json rejects both forms of roundup_power2_divisions at once.
func TestPyTorchConfigRangesValidate(t *testing.T) {
	cfg := torchConfig(PyTorchConfig{RoundupPower2Divisions: 4, RoundupPower2Ranges: []RoundupRange{{0, 8}}})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pytorch.roundup_power2_ranges: set with roundup_power2_divisions") {
		t.Errorf("Validate = %v", err)
	}
}
