// Command record runs a program under allocscope's allocation shim and writes its GPU memory
// allocations to an Arrow trace. See `record --help`.
package main

import (
	"os"

	"github.com/allocscope/allocscope/internal/cli/record"
)

func main() { os.Exit(record.Main(os.Args[1:], os.Stdout, os.Stderr)) }
