package intercept

import (
	"errors"
	"fmt"
	"strings"

	"github.com/allocscope/allocscope/pool"
)

// EnvPool names the environment variable that hands the shim the pool to serve allocations from
// (`record --pool`): the PoolSpec of a pool.json.
const EnvPool = "ALLOCSCOPE_POOL"

// maxPoolClasses is the most classes the shim's C pool takes (CP_MAX_CLASSES in cpool/pool.h).
const maxPoolClasses = 64

// CPoolConfig is a pool.Config as the shim's C pool takes it: the fields of struct cp_config
// (cpool/pool.c), the alignment defaulted. PoolSpec's line and package internal/intercept/cpool's C config are
// both made from it.
type CPoolConfig struct {
	Alignment      uint64       // alignment_bytes, pool.DefaultAlignment when 0
	LargeThreshold uint64       // size_class.large_threshold_bytes
	ArenaBytes     uint64       // size_class.arena_bytes
	GrowBytes      uint64       // best_fit.grow_bytes
	MaximumBytes   uint64       // best_fit.maximum_bytes
	GrowSlots      uint64       // size_class.grow_slots
	PerStream      bool         // size_class.per_stream
	FitAged        bool         // size_class.arena_fit "best-aged"
	Classes        []pool.Class // size_class.classes, at most 64
}

// NewCPoolConfig converts cfg for the shim's C pool. It refuses, with a one-line error, a config the
// C pool does not implement: a policy other than sizeclass, a paged arena, more than 64 classes.
func NewCPoolConfig(cfg pool.Config) (CPoolConfig, error) {
	if err := cfg.Validate(); err != nil {
		return CPoolConfig{}, fmt.Errorf("pool config: %w", err)
	}
	if cfg.Policy != pool.PolicySizeClass {
		return CPoolConfig{}, fmt.Errorf("policy %q: the pool inside the program implements %q only (analyze --emit-config writes one)",
			cfg.Policy, pool.PolicySizeClass)
	}
	sc := cfg.SizeClass
	switch {
	case sc.ArenaPaging != nil:
		return CPoolConfig{}, errors.New("size_class.arena_paging: the pool inside the program has no paged arena; " +
			"write the config with `analyze --emit-config` (without --arena paged)")
	case len(sc.Classes) > maxPoolClasses:
		return CPoolConfig{}, fmt.Errorf("size_class.classes: %d classes, the pool inside the program takes at most %d",
			len(sc.Classes), maxPoolClasses)
	}
	c := CPoolConfig{Alignment: cfg.Alignment, LargeThreshold: sc.LargeThreshold, ArenaBytes: sc.ArenaBytes,
		GrowSlots: sc.GrowSlots, PerStream: sc.PerStream, FitAged: sc.ArenaFit == pool.FitBestAged, Classes: sc.Classes}
	if c.Alignment == 0 {
		c.Alignment = pool.DefaultAlignment
	}
	if cfg.BestFit != nil {
		c.GrowBytes, c.MaximumBytes = cfg.BestFit.GrowBytes, cfg.BestFit.MaximumBytes
	}
	return c, nil
}

// PoolSpec encodes cfg for the shim's C pool (cpool/pool.c): one line, "config ALIGN THRESHOLD
// ARENA GROW_BYTES MAXIMUM GROW_SLOTS PER_STREAM FIT_AGED N" and N pairs "SIZE SLOTS", then, when the
// config sends sizes to CUDA, "pass M" and the M sizes. It refuses what NewCPoolConfig refuses, with
// the same error.
func PoolSpec(cfg pool.Config) (string, error) {
	c, err := NewCPoolConfig(cfg)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %d %d %d %d %d %d %d %d %d", c.Alignment, c.LargeThreshold, c.ArenaBytes, c.GrowBytes,
		c.MaximumBytes, c.GrowSlots, boolDigit(c.PerStream), boolDigit(c.FitAged), len(c.Classes))
	for _, cl := range c.Classes {
		fmt.Fprintf(&b, " %d %d", cl.Size, cl.Slots)
	}
	if n := len(cfg.PassThroughSizes); n > 0 {
		fmt.Fprintf(&b, " pass %d", n)
		for _, size := range cfg.PassThroughSizes {
			fmt.Fprintf(&b, " %d", size)
		}
	}
	return b.String(), nil
}

func boolDigit(b bool) int {
	if b {
		return 1
	}
	return 0
}
