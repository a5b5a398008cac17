//go:build unix && !linux

package requests

// populate is 0 where mmap has no MAP_POPULATE: pages fault in as a chunk fills.
const populate = 0
