package command

import (
	"bytes"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"github.com/allocscope/allocscope/internal/version"
)

// newTool is a command set up like the real ones: a size flag, one argument, and a subcommand; its
// run returns fail.
func newTool(fail error) (*cobra.Command, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	var size uint64
	root := &cobra.Command{Use: "tool ARG", Args: cobra.ExactArgs(1),
		RunE: func(*cobra.Command, []string) error { return fail }}
	BytesVar(root.Flags(), &size, "size", 0, "a size")
	root.AddCommand(&cobra.Command{Use: "sub", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
	Setup(root, &stdout, &stderr)
	return root, &stdout, &stderr
}

func TestExecute(t *testing.T) {
	for _, c := range []struct {
		name         string
		args         []string
		fail         error
		code         int
		stdout, want string
	}{
		{"success", []string{"a", "--size", "1.5GiB"}, nil, 0, "", ""},
		{"version", []string{"--version"}, nil, 0, "tool " + version.Version + "\n", ""},
		{"runtime failure", []string{"a"}, errors.New("open a: no such file or directory"), 1, "",
			"tool: open a: no such file or directory\n"},
		{"exit code", []string{"a"}, ExitCode(7), 7, "", ""},
		{"usage error from run", []string{"a"}, Usagef("--mode: %q is not a mode", "x"), 2, "",
			"tool: --mode: \"x\" is not a mode\nRun 'tool --help' for usage.\n"},
		{"bad size", []string{"a", "--size", "big"}, nil, 2, "",
			"tool: --size: \"big\" is not a byte count (examples: 81920, 512MiB, 80GiB)\nRun 'tool --help' for usage.\n"},
		{"wrong arguments", nil, nil, 2, "", "tool: accepts 1 arg(s), received 0\nRun 'tool --help' for usage.\n"},
		{"subcommand arguments", []string{"sub", "x"}, nil, 2, "",
			"tool: unknown command \"x\" for \"tool sub\"\nRun 'tool sub --help' for usage.\n"},
	} {
		root, stdout, stderr := newTool(c.fail)
		code := Execute(root, c.args)
		if code != c.code || stdout.String() != c.stdout || stderr.String() != c.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.name, code, stdout, stderr,
				c.code, c.stdout, c.want)
		}
	}
}

// A byte flag's default shows with its unit when that is exact, else in bytes; 0 shows as 0.
func TestBytesDefaultInHelp(t *testing.T) {
	for n, want := range map[uint64]string{1 << 30: "1 GiB", 1536: "1.5 KiB", 1100: "1100", 0: "0", 1000: "1000 B"} {
		if got := (*bytesValue)(&n).String(); got != want {
			t.Errorf("%d shows as %q, want %q", n, got, want)
		}
	}
}
