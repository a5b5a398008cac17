package upstreams

// AlignUp rounds n up to a multiple of align (above 0): the rounding of every request and
// reservation to an alignment or a granularity, by pool's policies and the simulated upstream alike.
func AlignUp(n, align uint64) uint64 {
	if align&(align-1) == 0 {
		return (n + align - 1) &^ (align - 1)
	}
	return (n + align - 1) / align * align
}
