package command_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/allocscope/allocscope/internal/cli/analyze"
	"github.com/allocscope/allocscope/internal/cli/command"
	"github.com/allocscope/allocscope/internal/cli/record"
	"github.com/allocscope/allocscope/internal/cli/replay"
	"github.com/allocscope/allocscope/internal/version"
)

// tools are the three commands, by name.
var tools = map[string]func(stdout, stderr io.Writer) *cobra.Command{
	"analyze": analyze.NewCommand, "record": record.NewCommand, "replay": replay.NewCommand,
}

// run executes a fresh command of tool with args and returns its exit code and output.
func run(tool string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := command.Execute(tools[tool](&stdout, &stderr), args)
	return code, stdout.String(), stderr.String()
}

// subcommandPaths lists the argument paths of cmd and its subcommands, cmd's own first (nil).
func subcommandPaths(cmd *cobra.Command, prefix []string) [][]string {
	paths := [][]string{prefix}
	for _, sub := range cmd.Commands() {
		paths = append(paths, subcommandPaths(sub, append(prefix[:len(prefix):len(prefix)], sub.Name()))...)
	}
	return paths
}

// Every line of every command's and subcommand's --help, and of a usage error, fits in
// command.HelpWidth (100) columns.
func TestHelpWidth(t *testing.T) {
	for tool, newCommand := range tools {
		for _, path := range subcommandPaths(newCommand(io.Discard, io.Discard), nil) {
			for _, args := range [][]string{append(path, "--help"), append(path, "--no-such-flag")} {
				code, stdout, stderr := run(tool, args...)
				if code != 0 && code != 2 || stdout+stderr == "" {
					t.Errorf("%s %q: exit code %d, no output", tool, args, code)
				}
				for i, line := range strings.Split(stdout+stderr, "\n") {
					if n := utf8.RuneCountInString(line); n > command.HelpWidth {
						t.Errorf("%s %q: line %d has %d columns, more than %d: %q", tool, args, i+1, n, command.HelpWidth, line)
					}
				}
			}
		}
	}
}

// `help` prints what --help prints and `version` what --version prints, exit 0: neither is taken
// for a trace or a program of that name.
func TestHelpAndVersionWords(t *testing.T) {
	for tool := range tools {
		_, wantHelp, _ := run(tool, "--help")
		code, stdout, stderr := run(tool, "help")
		if code != 0 || stdout != wantHelp || stderr != "" || !strings.Contains(stdout, "\nUsage:\n") {
			t.Errorf("%s help: exit code %d, stderr %q, stdout %q; want 0 and the --help text", tool, code, stderr, stdout)
		}
		wantVersion := tool + " " + version.Version + "\n"
		for _, args := range [][]string{{"version"}, {"--version"}} {
			code, stdout, stderr = run(tool, args...)
			if code != 0 || stdout != wantVersion || stderr != "" {
				t.Errorf("%s %q: exit code %d, stdout %q, stderr %q; want 0 and %q", tool, args, code, stdout, stderr, wantVersion)
			}
		}
	}
	_, want, _ := run("record", "convert", "--help")
	if code, stdout, _ := run("record", "help", "convert"); code != 0 || stdout != want {
		t.Errorf("record help convert: exit code %d, stdout %q; want 0 and convert's --help", code, stdout)
	}
}
