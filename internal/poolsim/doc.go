// Package poolsim is the simulated address space that package pool's allocators run on in
// analyze's what-if simulation and in tests: an Upstream that hands out addresses and counts
// what it holds, without memory. It sits below package pool (it imports only internal/spans,
// internal/addrindex and internal/upstreams, whose errors it wraps), so pool's own tests use it too.
package poolsim
