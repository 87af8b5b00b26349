// Command kdbtool is the operator's tool for kdb stores.
//
// Exit codes: 0 fine, 1 problems found, 2 usage, 3 I/O error, 130 stopped
// by SIGINT or SIGTERM (export and import, having removed what they made).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes shared by every subcommand.
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
	exitIO       = 3
	// exitInterrupted: export or import stopped by SIGINT or SIGTERM (as
	// a shell reports a command killed by SIGINT), having removed what it
	// made.
	exitInterrupted = 130
)

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
	hidden  bool
}

var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" {
		usage(stdout) // asked for: on stdout, for 'kdbtool -h | less'
		return exitOK
	}
	if args[0] == "help" {
		return help(args[1:], stdout, stderr)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kdbtool: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return runGuarded(args[0], c, args[1:], stdout, stderr)
}

// help is "kdbtool help [COMMAND]": the general usage ("help help" too),
// or COMMAND's own (as "kdbtool COMMAND -h" prints it), on stdout, exit 0;
// an unknown COMMAND, or more than one, is a usage error (exit 2, on
// stderr).
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0 || len(args) == 1 && args[0] == "help":
		usage(stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(stderr, "kdbtool help: want at most one command, got %d\n", len(args))
		usage(stderr)
		return exitUsage
	}
	c, ok := commands[args[0]]
	if !ok || c.hidden {
		fmt.Fprintf(stderr, "kdbtool help: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run([]string{"-h"}, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kdbtool <command> [flags] [args]")
	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'kdbtool <command> -h' or 'kdbtool help <command>' for a command's flags.")
	fmt.Fprintln(w, "Flags may come before or after the arguments; -- ends the flags.")
}

// newFlags returns a FlagSet that reports usage errors instead of exiting.
// Its usage goes to its output, stderr (parseFlags sends help asked for to
// stdout).
func newFlags(name, argsUsage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kdbtool %s [flags] %s\n", name, argsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit code to use when parsing
// stopped (help or a usage error), or -1 to go on. Help asked for (-h,
// --help) is printed on stdout, exit 0; a usage error, with the usage, on
// fs's output (stderr), exit 2. Flags may come before, between or after
// the positional arguments (see interspersed); after parsing, fs.Args
// holds the positional arguments in their order.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) int {
	// The flag package prints both help and its errors on fs's output:
	// keep them until it says which this is.
	stderr := fs.Output()
	var said bytes.Buffer
	fs.SetOutput(&said)
	err := fs.Parse(interspersed(fs, args))
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		stdout.Write(said.Bytes())
		return exitOK
	case err != nil:
		stderr.Write(said.Bytes())
		return exitUsage
	}
	return -1
}

// interspersed reorders args so that the flag package, which stops at the
// first non-flag argument, sees every flag: it returns the flags (each with
// its value) first, then "--", then the positional arguments in their
// order. A flag is an argument that starts with "-" or "--" and is not "-"
// alone; "--" ends the flags (everything after it is positional). A flag
// written as -name=value or --name=value carries its value; a known flag
// that is not a boolean and has no "=" takes the next argument as its
// value, whatever it looks like (as the flag package does). Unknown flags
// are passed through for fs.Parse to reject with a usage error, as is a
// non-boolean flag with no value left (then no "--" is added, so that
// fs.Parse does not take "--" for its value).
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(a[1:], "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil || isBoolFlag(f) {
			continue
		}
		if i+1 == len(args) {
			return flags // "flag needs an argument" from fs.Parse
		}
		i++
		flags = append(flags, args[i])
	}
	return append(append(flags, "--"), pos...)
}

// isBoolFlag reports whether f is set by its name alone (-json), the way
// the flag package decides it.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
