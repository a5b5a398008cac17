//go:build !cgo

package cpool

import (
	"github.com/allocscope/allocscope/internal/requests"
	"github.com/allocscope/allocscope/pool"
)

// Available reports whether this build has the C pool (it needs cgo).
const Available = false

// Pool is the C pool; a build without cgo has none.
type Pool struct{}

// Ops is an op sequence converted for the C pool; a build without cgo has none.
type Ops struct{}

// New returns ErrNeedsCgo.
func New(pool.Config, pool.Upstream) (*Pool, error) { return nil, ErrNeedsCgo }

// NewOps returns ErrNeedsCgo.
func NewOps([]requests.Op, []uint64) (*Ops, error) { return nil, ErrNeedsCgo }

// BookBytes returns ErrNeedsCgo.
func BookBytes(pool.Config) (uint64, error) { return 0, ErrNeedsCgo }

// Len returns 0.
func (o *Ops) Len() int { return 0 }

// Run returns ErrNeedsCgo.
func (p *Pool) Run(*Ops, bool) (*Result, error) { return nil, ErrNeedsCgo }

// Alloc returns ErrNeedsCgo.
func (p *Pool) Alloc(uint64, uint64) (uint64, error) { return 0, ErrNeedsCgo }

// Free returns ErrNeedsCgo.
func (p *Pool) Free(uint64, uint64) error { return ErrNeedsCgo }

// Stats returns zero counters.
func (p *Pool) Stats() pool.Stats { return pool.Stats{} }

// PeakStats returns zero counters.
func (p *Pool) PeakStats() pool.Stats { return pool.Stats{} }

// ReleaseIdle returns 0.
func (p *Pool) ReleaseIdle() uint64 { return 0 }

// Close does nothing.
func (p *Pool) Close() error { return nil }
