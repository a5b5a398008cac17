// Package poolsim is the simulated address space that package pool's allocators run on in
// analyze's what-if simulation and in tests: an Upstream that hands out addresses and counts
// what it holds, without memory. It imports no allocscope package above the floor of pool, so
// pool's own tests use it too.
package poolsim
