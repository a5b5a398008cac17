// Command replay replays a trace's allocation requests against a pooled allocator, raw allocation
// and CUDA's stream-ordered allocator, and proves the speedup and the memory figures. See
// `replay --help`.
package main

import (
	"os"

	"github.com/allocscope/allocscope/internal/cli/replay"
)

func main() { os.Exit(replay.Main(os.Args[1:], os.Stdout, os.Stderr)) }
