package pool

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Validate checks the config. Its error names the offending field by its JSON path, e.g.
// `size_class.classes[2].size_bytes: 1000 is not a multiple of alignment_bytes 512`.
func (c Config) Validate() error {
	if c.Version != ConfigVersion {
		return fmt.Errorf("version: %d is not supported (this build reads version %d)", c.Version, ConfigVersion)
	}
	if !slices.Contains(policies, c.Policy) {
		return fmt.Errorf("policy: %q is not one of %q", c.Policy, policies)
	}
	if c.Alignment != 0 && bits.OnesCount64(c.Alignment) != 1 {
		return fmt.Errorf("alignment_bytes: %d is not a power of two", c.Alignment)
	}
	if c.Alignment != 0 && c.Alignment < MinAlignment {
		return fmt.Errorf("alignment_bytes: %d is below %d, cudaMalloc's alignment", c.Alignment, MinAlignment)
	}
	if c.Policy == PolicySizeClass && c.SizeClass == nil {
		return errors.New("size_class: required for policy \"sizeclass\"")
	}
	if err := validPassThrough(c.PassThroughSizes); err != nil {
		return err
	}
	if c.SizeClass != nil {
		if err := c.SizeClass.validate(c.alignment(), c.BestFit); err != nil {
			return fmt.Errorf("size_class.%w", err)
		}
	}
	if c.BestFit != nil {
		if err := c.BestFit.validate(); err != nil {
			return fmt.Errorf("best_fit.%w", err)
		}
	}
	if c.PyTorch != nil {
		if err := c.PyTorch.validate(); err != nil {
			return fmt.Errorf("pytorch.%w", err)
		}
	}
	return nil
}

// MaxPassThroughSizes bounds Config.PassThroughSizes (EXPORT_SIZES of the shim's internal/intercept/shim/log.h).
const MaxPassThroughSizes = 16

// validPassThrough checks Config.PassThroughSizes.
func validPassThrough(sizes []uint64) error {
	if len(sizes) > MaxPassThroughSizes {
		return fmt.Errorf("pass_through_sizes: %d sizes, at most %d", len(sizes), MaxPassThroughSizes)
	}
	for i, n := range sizes {
		if n == 0 {
			return fmt.Errorf("pass_through_sizes[%d]: 0 is not a request size", i)
		}
		if slices.Contains(sizes[:i], n) {
			return fmt.Errorf("pass_through_sizes[%d]: %d is there twice", i, n)
		}
	}
	return nil
}

// MinAlignment is the smallest Config.Alignment accepted: cudaMalloc's alignment, 256 bytes.
const MinAlignment = 256

// MaxSlots bounds the slots of all classes together (and SizeClassConfig.GrowSlots), so that the
// host bookkeeping of record --pool's C pool stays under MaxBookkeepingBytes: its tables take up to
// 56 bytes per slot, doubled by their power-of-two capacities and by a quarter of slack
// (cp_book_bytes in internal/intercept/cpool/pool.c), about 140 bytes per slot. 2^27 slots once passed and
// touched 14 GB of host memory. The shim's spec parser is to refuse more slots than this too.
const MaxSlots = 1 << 22

// MaxBookkeepingBytes is the host memory the C pool's bookkeeping of a valid plan stays under.
const MaxBookkeepingBytes = 1 << 30

func (s *SizeClassConfig) validate(align uint64, bf *BestFitConfig) error {
	var prev, slots uint64
	planned := s.ArenaBytes
	for i, cl := range s.Classes {
		slots += cl.Slots
		if slots > MaxSlots {
			return fmt.Errorf("classes[%d].slots: %d slots in all exceed the limit of %d (the pool's bookkeeping must stay under 1 GiB of host memory)", i, slots, MaxSlots)
		}
		switch {
		case cl.Size == 0:
			return fmt.Errorf("classes[%d].size_bytes: must be above 0", i)
		case cl.Size%align != 0:
			return fmt.Errorf("classes[%d].size_bytes: %d is not a multiple of alignment_bytes %d", i, cl.Size, align)
		case cl.Size <= prev:
			return fmt.Errorf("classes[%d].size_bytes: %d is not above the previous class's %d (classes must be strictly ascending)", i, cl.Size, prev)
		case cl.Slots > 0 && cl.Size > math.MaxUint64/cl.Slots:
			return fmt.Errorf("classes[%d].slots: %d slots of %d bytes overflow", i, cl.Slots, cl.Size)
		case s.GrowSlots > 0 && cl.Size > math.MaxUint64/s.GrowSlots/2:
			return fmt.Errorf("grow_slots: %d slots of %d bytes overflow", s.GrowSlots, cl.Size)
		}
		prev = cl.Size
		if planned += cl.Size * cl.Slots; planned < cl.Size*cl.Slots || planned > math.MaxUint64/2 {
			return fmt.Errorf("classes[%d].slots: the planned bytes overflow", i)
		}
	}
	if err := s.ArenaFit.validate(); err != nil {
		return fmt.Errorf("arena_fit: %w", err)
	}
	if s.ArenaPaging != nil {
		if err := s.ArenaPaging.validate(align, s.ArenaBytes); err != nil {
			return fmt.Errorf("arena_paging.%w", err)
		}
		planned -= s.ArenaBytes
	}
	if s.ArenaBytes > math.MaxUint64/2 {
		return fmt.Errorf("arena_bytes: %d is too large", s.ArenaBytes)
	}
	if s.GrowSlots > MaxSlots {
		return fmt.Errorf("grow_slots: %d exceeds the limit of %d", s.GrowSlots, MaxSlots)
	}
	if bf != nil && bf.InitialBytes != 0 && bf.InitialBytes != s.ArenaBytes {
		return fmt.Errorf("arena_bytes: %d differs from best_fit.initial_bytes %d (set the arena's size here and leave initial_bytes 0)", s.ArenaBytes, bf.InitialBytes)
	}
	return nil
}

func (b *BestFitConfig) validate() error {
	if b.MaximumBytes != 0 && b.MaximumBytes < b.InitialBytes {
		return fmt.Errorf("maximum_bytes: %d is below initial_bytes %d", b.MaximumBytes, b.InitialBytes)
	}
	if b.InitialBytes > math.MaxUint64/2 || b.GrowBytes > math.MaxUint64/2 {
		return errors.New("initial_bytes: too large")
	}
	if err := b.Fit.validate(); err != nil {
		return fmt.Errorf("fit: %w", err)
	}
	return nil
}

func (p *PyTorchConfig) validate() error {
	if p.MaxSplitSizeMB != 0 && p.MaxSplitSizeMB < torchLargeBuffer>>20 {
		return fmt.Errorf("max_split_size_mb: %d is below PyTorch's minimum of %d", p.MaxSplitSizeMB, torchLargeBuffer>>20)
	}
	if p.MaxSplitSizeMB > math.MaxUint64>>21 {
		return fmt.Errorf("max_split_size_mb: %d is too large", p.MaxSplitSizeMB)
	}
	if d := p.RoundupPower2Divisions; d > 1 && !validDivisions(d) {
		return fmt.Errorf("roundup_power2_divisions: %d is not a power of two up to %d", d, maxDivisions)
	}
	return p.validateRangesAndGC()
}
