// Package command holds the conventions allocscope's three commands (record, analyze, replay)
// share: --version, usage errors that exit 2 with a hint, runtime errors that exit 1, byte-count
// flags.
package command

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/allocscope/allocscope/internal/version"
)

// Exit codes of the commands, besides the traced program's own that record passes on.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed: unreadable input, a failed check, ...
	ExitUsage   = 2 // the command line is wrong: unknown flag, bad flag value, wrong arguments
)

// UsageError is a wrong command line. Execute prints it with a hint to run --help and exits 2.
type UsageError struct{ Err error }

// Error returns the underlying error's message.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Usage marks err, when not nil, as a wrong command line.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// ExitCode is an error that ends the command with this exit code and prints nothing: record's
// traced program's exit code.
type ExitCode int

// Error says which exit code it carries; Execute does not print it.
func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// Setup applies the conventions to root and its subcommands: output to stdout and stderr, a
// --version flag on root that prints "<name> <version>", cobra's own error and usage printing
// off (Execute prints errors), and flag and argument errors turned into UsageErrors.
func Setup(root *cobra.Command, stdout, stderr io.Writer) {
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.Version = version.Version
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.Flags().Bool("version", false, "print the version and exit")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(describeFlagError(err)) })
	root.SetUsageTemplate(wrappedUsage(root.UsageTemplate()))
	setupTree(root)
}

// HelpWidth is the most columns a line of any command's usage or help text takes.
const HelpWidth = 100

// wrappedUsage is cobra's usage template with the flag lists wrapped to HelpWidth columns.
func wrappedUsage(template string) string {
	return strings.ReplaceAll(template, ".FlagUsages ", fmt.Sprintf(".FlagUsagesWrapped %d ", HelpWidth))
}

// setupTree silences cobra's printing and marks argument errors as usage errors, on cmd and its
// subcommands.
func setupTree(cmd *cobra.Command) {
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	if validate := cmd.Args; validate != nil {
		cmd.Args = func(c *cobra.Command, args []string) error { return Usage(validate(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		setupTree(sub)
	}
}

// Execute runs root (set up by Setup) with args and returns the exit code: 0, the code of an
// ExitCode error, 2 for a UsageError (printed as "<root>: <error>" and a line naming the failed
// command's --help), 1 for any other error (printed as "<root>: <error>").
//
// A first argument "help" and a lone "version" are the words, not files or programs of those
// names: "help" prints the usage (of the subcommand named after it, where there are subcommands),
// "version" what --version prints. Name ./help or ./version for a file.
func Execute(root *cobra.Command, args []string) int {
	if len(args) == 1 && args[0] == "version" {
		fmt.Fprintf(root.OutOrStdout(), "%s %s\n", root.Name(), root.Version)
		return ExitOK
	}
	if len(args) > 0 && args[0] == "help" && !root.HasSubCommands() {
		args = []string{"--help"} // with subcommands, cobra's help command reads "help convert"
	}
	root.SetArgs(args)
	failed, err := root.ExecuteC()
	var code ExitCode
	var usage *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage):
		fmt.Fprintf(root.ErrOrStderr(), "%s: %v\nRun '%s --help' for usage.\n", root.Name(), err, failed.CommandPath())
		return ExitUsage
	default:
		fmt.Fprintf(root.ErrOrStderr(), "%s: %v\n", root.Name(), err)
		return ExitFailure
	}
}

// valueKinds say what a flag of each pflag type takes, for the message about a bad value.
var valueKinds = map[string]string{
	"int":      "an integer",
	"uint64":   "a non-negative integer",
	"float64":  "a number",
	"duration": "a duration (examples: 500ms, 10s, 2m)",
	"bool":     "true or false",
}

// describeFlagError rewrites pflag's message about a bad flag value, `invalid argument "x" for
// "--top" flag: strconv.ParseInt: parsing "x": invalid syntax`, as `--top: "x" is not an
// integer`. Values of our own flag types explain themselves: `--capacity: "x" is not a byte
// count ...`.
func describeFlagError(err error) error {
	var invalid *pflag.InvalidValueError
	if !errors.As(err, &invalid) {
		return err
	}
	name := "--" + invalid.GetFlag().Name
	if kind, ok := valueKinds[invalid.GetFlag().Value.Type()]; ok {
		return fmt.Errorf("%s: %q is not %s", name, invalid.GetValue(), kind)
	}
	return fmt.Errorf("%s: %w", name, invalid.Unwrap())
}
