// Command dumpreqs prints the native allocation requests of a trace as text, one per line:
// "a ADDRESS SIZE" for an allocation, "f ADDRESS" for a free. It feeds the experiments in
// docs/experiments (see docs/experiments/README.md), which are kept out of the product.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/allocscope/allocscope/trace"
)

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
	r, err := trace.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	out := bufio.NewWriter(w)
	for {
		batch, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out.Flush()
		}
		if err != nil {
			return err
		}
		for i := range batch {
			e := &batch[i]
			if e.Layer == trace.LayerFramework || !e.OK() || e.Address == 0 {
				continue
			}
			switch e.Request() {
			case trace.RequestAlloc:
				if e.Size > 0 {
					fmt.Fprintf(out, "a %d %d\n", e.Address, e.Size)
				}
			case trace.RequestFree:
				fmt.Fprintf(out, "f %d\n", e.Address)
			}
		}
	}
}
