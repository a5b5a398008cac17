//go:build ignore

// Command dumpreqs prints the allocation requests of a trace as text, one per line: "a BLOCK SIZE"
// for an allocation, "f BLOCK" for a free. The requests are the request stream that analyze
// simulates and replay replays (package internal/requests); BLOCK is the block's slot there, a
// number no other live block has (a freed block's number is given to a later one). It feeds the
// experiments in docs/experiments (see docs/experiments/README.md), which are kept out of the
// product: the build tag keeps it out of the module's builds, and it runs by file name:
//
//	go run ./docs/experiments/dumpreqs/main.go TRACE
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/allocscope/allocscope/internal/requests"
)

// main prints the requests of the trace named by the one argument.
func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dumpreqs TRACE")
		os.Exit(2)
	}
	if err := dump(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dumpreqs:", err)
		os.Exit(1)
	}
}

// dump writes the requests of the trace at path to w.
func dump(path string, w io.Writer) error {
	t, err := requests.ExtractFile(path)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(w)
	for _, op := range t.Ops {
		switch {
		case op.IsAlloc():
			fmt.Fprintf(out, "a %d %d\n", op.Slot, op.Size)
		case op.IsFree():
			fmt.Fprintf(out, "f %d\n", op.Slot)
		}
	}
	return out.Flush()
}
