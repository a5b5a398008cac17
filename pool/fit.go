package pool

import "fmt"

// Fit is the placement strategy of a best-fit arena (PolicyBestFit, and PolicySizeClass's
// large-block arena): from which end of the chosen free span a block is cut. Either way the span
// is the smallest free one that fits, lowest address among equals.
type Fit string

// The placement strategies.
const (
	// FitBest cuts the block from the low end of the span, like RMM's pool. It is the default.
	FitBest Fit = "best"
	// FitBestAged cuts the block from the end of the span next to its older neighbour: the live
	// block allocated earlier, a segment end or a free span counting as oldest (low end on a
	// tie). The younger neighbour, likely to be freed sooner, then merges on free with the rest
	// of the span. This keeps a block that grows by reallocation (a KV cache concatenated each
	// step: allocate n+1, free n) alternating between the ends of one span instead of leaving
	// holes too small for its next size.
	FitBestAged Fit = "best-aged"
)

// Fits lists every placement strategy, the default first.
var Fits = []Fit{FitBest, FitBestAged}

// orDefault returns f, or FitBest when f is empty.
func (f Fit) orDefault() Fit {
	if f == "" {
		return FitBest
	}
	return f
}

func (f Fit) validate() error {
	for _, g := range Fits {
		if f.orDefault() == g {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %q", f, Fits)
}
