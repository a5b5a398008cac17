// Command analyze reports how a program uses GPU memory and which memory pool it should use. See
// `analyze --help`.
package main

import (
	"os"

	"github.com/allocscope/allocscope/internal/cli/analyze"
)

func main() { os.Exit(analyze.Main(os.Args[1:], os.Stdout, os.Stderr)) }
