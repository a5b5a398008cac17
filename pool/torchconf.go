package pool

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// This file reads and writes PYTORCH_CUDA_ALLOC_CONF values as PyTorchConfig.

// RoundupRange is one entry of roundup_power2_divisions's per-size-range form
// `[256:1,512:2,1024:4,>:8]`, read as PyTorch's AcceleratorAllocatorConfig does
// (c10/core/AllocatorConfig.cpp, parseRoundUpPower2Divisions; the parser that also reads
// PYTORCH_ALLOC_CONF, PyTorch 2.9 on; the H200 snapshots of testdata/torch are 2.11). The divisions
// are kept per log2 bucket of the request size: bucket 0 holds sizes below 2 MiB, bucket i
// (1 ≤ i < 15) sizes in [2^i, 2^(i+1)) MiB, bucket 15 sizes from 32 GiB on. An entry of SizeMB
// 2^i sets bucket i (the last one beyond 15); the first entry also sets every bucket below its
// own; SizeMB 0 stands for `>` and sets every bucket above the previous entry's (above bucket 0
// when it comes first). A bucket no entry sets rounds to 512 B only. Earlier 2.x releases, whose
// parser is in c10/cuda/CUDAAllocatorConfig.cpp, also set the previous entry's own bucket with `>`,
// and some of them round a bucket of 1 division to the next power of two, where this model (like
// PyTorch now) leaves it at 512 B: a range form whose last entry has the divisions of its `>`,
// none of them 1, reads the same in every 2.x.
type RoundupRange struct {
	SizeMB    uint64 `json:"size_mb"`   // a power of two (MiB), or 0 for `>`
	Divisions uint64 `json:"divisions"` // 0 or 1 (no rounding) or a power of two
}

const (
	roundupBuckets  = 16      // PyTorch's kRoundUpPowerOfTwoIntervals
	roundupLog2Base = 20      // log2 of the first bucket's start, 1 MiB (kRoundUpPowerOfTwoStart)
	maxDivisions    = 1 << 20 // the most divisions this model accepts
)

func validDivisions(d uint64) bool { return bits.OnesCount64(d) == 1 && d <= maxDivisions }

// validateRangesAndGC checks RoundupPower2Ranges and GarbageCollectionThreshold.
func (p *PyTorchConfig) validateRangesAndGC() error {
	if len(p.RoundupPower2Ranges) > 0 && p.RoundupPower2Divisions > 1 {
		return errors.New("roundup_power2_ranges: set with roundup_power2_divisions (PyTorch takes one form)")
	}
	for i, r := range p.RoundupPower2Ranges {
		if r.SizeMB != 0 && (bits.OnesCount64(r.SizeMB) != 1 || r.SizeMB > 1<<40) {
			return fmt.Errorf("roundup_power2_ranges[%d].size_mb: %d is not a power of two", i, r.SizeMB)
		}
		if r.Divisions > 1 && !validDivisions(r.Divisions) {
			return fmt.Errorf("roundup_power2_ranges[%d].divisions: %d is not 0 or a power of two up to %d", i,
				r.Divisions, maxDivisions)
		}
	}
	if g := p.GarbageCollectionThreshold; g != 0 && !(g > 0 && g < 1) {
		return fmt.Errorf("garbage_collection_threshold: %g is not in (0, 1)", g)
	}
	return nil
}

// divisionTable is the roundup_power2_divisions in force for each size bucket (see RoundupRange).
func (p *PyTorchConfig) divisionTable() (t [roundupBuckets]uint64) {
	if len(p.RoundupPower2Ranges) == 0 {
		for i := range t {
			t[i] = p.RoundupPower2Divisions
		}
		return t
	}
	last, first := 0, true
	for _, r := range p.RoundupPower2Ranges {
		if r.SizeMB == 0 {
			for i := last + 1; i < roundupBuckets; i++ {
				t[i] = r.Divisions
			}
			continue
		}
		i := min(63-bits.LeadingZeros64(r.SizeMB), roundupBuckets-1)
		if first {
			for j := range i {
				t[j] = r.Divisions
			}
			first = false
		}
		t[i], last = r.Divisions, i
	}
	return t
}

// roundupBucket is the bucket of the division table that a request of size bytes falls in.
func roundupBucket(size uint64) int {
	return min(max(63-bits.LeadingZeros64(size)-roundupLog2Base, 0), roundupBuckets-1)
}

// AllocConf returns p as a PYTORCH_CUDA_ALLOC_CONF value ("" for PyTorch's defaults), the
// options in the order max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold,
// expandable_segments. CapacityBytes is not an option of PyTorch's and is left out.
func (p PyTorchConfig) AllocConf() string {
	var parts []string
	if p.MaxSplitSizeMB > 0 {
		parts = append(parts, fmt.Sprintf("max_split_size_mb:%d", p.MaxSplitSizeMB))
	}
	if len(p.RoundupPower2Ranges) > 0 {
		ranges := make([]string, len(p.RoundupPower2Ranges))
		for i, r := range p.RoundupPower2Ranges {
			key := ">"
			if r.SizeMB > 0 {
				key = strconv.FormatUint(r.SizeMB, 10)
			}
			ranges[i] = fmt.Sprintf("%s:%d", key, r.Divisions)
		}
		parts = append(parts, "roundup_power2_divisions:["+strings.Join(ranges, ",")+"]")
	} else if p.RoundupPower2Divisions > 1 {
		parts = append(parts, fmt.Sprintf("roundup_power2_divisions:%d", p.RoundupPower2Divisions))
	}
	if p.GarbageCollectionThreshold > 0 {
		parts = append(parts, "garbage_collection_threshold:"+strconv.FormatFloat(p.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if p.ExpandableSegments {
		parts = append(parts, "expandable_segments:True")
	}
	return strings.Join(parts, ",")
}

// SplitAllocConf splits a PYTORCH_CUDA_ALLOC_CONF value into its options ("key:value"), at the
// commas outside brackets, without spaces (PyTorch ignores them); "" has none.
func SplitAllocConf(conf string) []string {
	conf = strings.ReplaceAll(conf, " ", "")
	var out []string
	depth, start := 0, 0
	for i, c := range conf {
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == ',' && depth == 0:
			out = append(out, conf[start:i])
			start = i + 1
		}
	}
	if conf != "" {
		out = append(out, conf[start:])
	}
	return out
}

// ParseAllocConf reads a PYTORCH_CUDA_ALLOC_CONF value of PyTorch's caching allocator into a
// PyTorchConfig (CapacityBytes 0), and validates it. It takes max_split_size_mb,
// roundup_power2_divisions (a number or the range form), garbage_collection_threshold,
// expandable_segments and backend:native; it ignores the options that do not change where
// device memory goes (release_lock_on_cudamalloc, pinned_*), and refuses the others:
// backend:cudaMallocAsync is another allocator (PolicyStreamOrdered), max_non_split_rounding_mb
// is not modelled.
func ParseAllocConf(conf string) (PyTorchConfig, error) {
	var p PyTorchConfig
	for _, opt := range SplitAllocConf(conf) {
		key, val, ok := strings.Cut(opt, ":")
		if !ok || val == "" {
			return PyTorchConfig{}, fmt.Errorf("parse %q: option %q has no value", conf, opt)
		}
		if err := p.setOption(key, val); err != nil {
			return PyTorchConfig{}, fmt.Errorf("parse %q: %s: %w", conf, key, err)
		}
	}
	if err := p.validate(); err != nil {
		return PyTorchConfig{}, fmt.Errorf("parse %q: %w", conf, err)
	}
	return p, nil
}

// setOption sets one option of a PYTORCH_CUDA_ALLOC_CONF value.
func (p *PyTorchConfig) setOption(key, val string) error {
	var err error
	switch {
	case key == "max_split_size_mb":
		p.MaxSplitSizeMB, err = strconv.ParseUint(val, 10, 64)
	case key == "roundup_power2_divisions" && strings.HasPrefix(val, "["):
		p.RoundupPower2Ranges, err = parseRoundupRanges(val)
	case key == "roundup_power2_divisions":
		p.RoundupPower2Divisions, err = strconv.ParseUint(val, 10, 64)
		if err == nil && !validDivisions(p.RoundupPower2Divisions) {
			err = fmt.Errorf("%d is not a power of two", p.RoundupPower2Divisions)
		}
	case key == "garbage_collection_threshold":
		p.GarbageCollectionThreshold, err = strconv.ParseFloat(val, 64)
	case key == "expandable_segments" && (val == "True" || val == "False"):
		p.ExpandableSegments = val == "True"
	case key == "backend" && val == "native", strings.HasPrefix(key, "pinned_"), strings.HasPrefix(key, "release_lock_on_"):
	case key == "backend" && val == "cudaMallocAsync":
		err = errors.New("cudaMallocAsync is not the caching allocator (PolicyStreamOrdered models it)")
	default:
		err = fmt.Errorf("%q is not an option the model knows", key+":"+val)
	}
	return err
}

// parseRoundupRanges reads roundup_power2_divisions's range form, "[256:1,512:2,>:8]".
func parseRoundupRanges(val string) ([]RoundupRange, error) {
	inner, ok := strings.CutSuffix(val[1:], "]")
	if !ok || inner == "" {
		return nil, fmt.Errorf("%q is not a list [size_mb:divisions,...]", val)
	}
	var out []RoundupRange
	for _, entry := range strings.Split(inner, ",") {
		k, v, ok := strings.Cut(entry, ":")
		var r RoundupRange
		var kerr, verr error
		if k != ">" {
			r.SizeMB, kerr = strconv.ParseUint(k, 10, 64)
		}
		r.Divisions, verr = strconv.ParseUint(v, 10, 64)
		if !ok || kerr != nil || verr != nil || (k != ">" && r.SizeMB == 0) {
			return nil, fmt.Errorf("entry %q is not size_mb:divisions or >:divisions", entry)
		}
		out = append(out, r)
	}
	return out, nil
}
