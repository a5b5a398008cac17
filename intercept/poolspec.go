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

// maxPoolClasses is the most classes the shim's C pool takes (CP_MAX_CLASSES in shim/pool.h).
const maxPoolClasses = 64

// PoolSpec encodes cfg for the shim's C pool (shim/pool.h): one line, "config ALIGN THRESHOLD
// ARENA GROW_BYTES MAXIMUM GROW_SLOTS PER_STREAM FIT_AGED N" and N pairs "SIZE SLOTS". It refuses,
// with a one-line error, a config the C pool does not implement: a policy other than sizeclass, a
// paged arena, more than 64 classes.
func PoolSpec(cfg pool.Config) (string, error) {
	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("pool config: %w", err)
	}
	if cfg.Policy != pool.PolicySizeClass {
		return "", fmt.Errorf("policy %q: the pool inside the program implements %q only (analyze --emit-config writes one)",
			cfg.Policy, pool.PolicySizeClass)
	}
	sc := cfg.SizeClass
	switch {
	case sc.ArenaPaging != nil:
		return "", errors.New("size_class.arena_paging: the pool inside the program has no paged arena; " +
			"write the config with `analyze --arena fixed --emit-config`")
	case len(sc.Classes) > maxPoolClasses:
		return "", fmt.Errorf("size_class.classes: %d classes, the pool inside the program takes at most %d",
			len(sc.Classes), maxPoolClasses)
	}
	align := cfg.Alignment
	if align == 0 {
		align = pool.DefaultAlignment
	}
	var grow, maximum uint64
	if cfg.BestFit != nil {
		grow, maximum = cfg.BestFit.GrowBytes, cfg.BestFit.MaximumBytes
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %d %d %d %d %d %d %d %d %d", align, sc.LargeThreshold, sc.ArenaBytes, grow, maximum,
		sc.GrowSlots, boolDigit(sc.PerStream), boolDigit(sc.ArenaFit == pool.FitBestAged), len(sc.Classes))
	for _, c := range sc.Classes {
		fmt.Fprintf(&b, " %d %d", c.Size, c.Slots)
	}
	return b.String(), nil
}

func boolDigit(b bool) int {
	if b {
		return 1
	}
	return 0
}
