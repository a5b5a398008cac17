package command

import (
	"io"
	"os"
	"strconv"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/allocscope/allocscope/internal/units"
)

// bytesValue is a pflag.Value holding a byte count, read by units.ParseBytes.
type bytesValue uint64

// String writes the count as --help shows a default: with its unit when that is exact ("1 GiB"),
// else in bytes.
func (b *bytesValue) String() string {
	n := uint64(*b)
	if s := units.FormatBytes(n); n > 0 {
		if back, err := units.ParseBytes(s); err == nil && back == n {
			return s
		}
	}
	return strconv.FormatUint(n, 10)
}

// Set reads s with units.ParseBytes.
func (b *bytesValue) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}

// Type names the value in --help.
func (b *bytesValue) Type() string { return "bytes" }

// BytesVar defines a flag holding a byte count, given as 81920, 512MiB, 80GiB or 1.5GB.
func BytesVar(f *pflag.FlagSet, p *uint64, name string, value uint64, usage string) {
	*p = value
	f.Var((*bytesValue)(p), name, usage)
}

// IsTerminal reports whether w is a terminal, where progress bars are drawn.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
