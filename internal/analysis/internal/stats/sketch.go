// Package stats computes streaming statistics of allocation traces: counts, live bytes, peaks,
// histograms, lifetimes and anomalies. Its memory grows with the number of live allocations and
// distinct sizes, not with the number of events.
package stats

import (
	"math"
	"math/bits"
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Sketch keeps a bounded sample of values for quantiles: every value while there are at most
// Cap of them, then a uniform reservoir sample of Cap values (Vitter's algorithm R with a
// fixed-seed generator, so results are reproducible).
type Sketch struct {
	cap     int
	n       uint64
	samples []float64
	rng     uint64
	sorted  bool
	min     float64
	max     float64
}

// NewSketch returns an empty sketch that keeps at most capacity values.
func NewSketch(capacity int) *Sketch {
	return &Sketch{cap: capacity, rng: 0x9e3779b97f4a7c15}
}

// Add records one value.
func (s *Sketch) Add(v float64) {
	if s.n == 0 {
		s.min, s.max = v, v
	} else if v < s.min {
		s.min = v
	} else if v > s.max {
		s.max = v
	}
	s.n++
	s.sorted = false
	if len(s.samples) < s.cap {
		if len(s.samples) == cap(s.samples) {
			s.grow()
		}
		s.samples = append(s.samples, v)
		return
	}
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	if j, _ := bits.Mul64(s.rng, s.n); j < uint64(s.cap) { // j uniform in [0, n)
		s.samples[j] = v
	}
}

// grow doubles the sample's capacity, up to the sketch's (append grows large slices by only 1.25×,
// copying them more often).
func (s *Sketch) grow() {
	c := min(max(2*cap(s.samples), 64), s.cap)
	s.samples = slices.Grow(s.samples, c-len(s.samples))
}

// Count returns the number of values added.
func (s *Sketch) Count() uint64 { return s.n }

// Exact reports whether the sketch still holds every value.
func (s *Sketch) Exact() bool { return s.n <= uint64(s.cap) }

func (s *Sketch) sort() {
	if !s.sorted {
		slices.Sort(s.samples)
		s.sorted = true
	}
}

// Quantile returns the p-quantile (0 ≤ p ≤ 1) of the values, using gonum's empirical quantile;
// it returns 0 for an empty sketch.
func (s *Sketch) Quantile(p float64) float64 {
	if s.n == 0 {
		return 0
	}
	if p <= 0 {
		return s.min
	}
	if p >= 1 {
		return s.max
	}
	s.sort()
	return stat.Quantile(p, stat.Empirical, s.samples, nil)
}

// CDF returns at most points points (x, fraction of values ≤ x), x ascending.
func (s *Sketch) CDF(points int) [][2]float64 {
	if s.n == 0 || points < 2 {
		return nil
	}
	s.sort()
	out := make([][2]float64, 0, points)
	n := len(s.samples)
	for i := range points {
		idx := int(math.Round(float64(i) * float64(n-1) / float64(points-1)))
		x := s.samples[idx]
		// Take the last index holding x so the fraction is that of values ≤ x.
		last, _ := slices.BinarySearch(s.samples, math.Nextafter(x, math.Inf(1)))
		frac := float64(last) / float64(n)
		if len(out) > 0 && out[len(out)-1][0] == x {
			continue
		}
		out = append(out, [2]float64{x, frac})
	}
	return out
}

// clone returns a copy keeping at most capacity values: the first ones of the sample, which is
// uniform as a whole and so in any part.
func (s *Sketch) clone(capacity int) *Sketch {
	c := *s
	c.cap = capacity
	c.samples = append([]float64(nil), s.samples[:min(len(s.samples), capacity)]...)
	c.sorted = false
	return &c
}
