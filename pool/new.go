package pool

import (
	"errors"
	"fmt"
)

// New builds the allocator that cfg describes on top of up. It validates cfg first, and reserves
// the planned memory (PolicySizeClass's slabs and arena, PolicyBestFit's initial region) from up.
// Allocators are safe for concurrent use unless the SingleGoroutine option is given.
func New(cfg Config, up Upstream, opts ...Option) (Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool config: %w", err)
	}
	if up == nil {
		return nil, errors.New("new pool: nil upstream")
	}
	o := collect(opts)
	var a Allocator
	var err error
	switch cfg.Policy {
	case PolicySizeClass:
		a, err = newSizeClass(cfg, up, o)
	case PolicyBestFit:
		a, err = newBestFit(cfg, up, o)
	case PolicyPyTorch:
		a, err = newPyTorch(cfg, up, o)
	case PolicyStreamOrdered:
		a = newStreamOrdered(cfg, up, o)
	default:
		a = newRaw(cfg, up, o)
	}
	if err != nil {
		return nil, fmt.Errorf("new %s pool: %w", cfg.Policy, err)
	}
	return a, nil
}
