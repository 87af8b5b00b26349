package main

import (
	"strings"
	"testing"
)

// TestHelp_NamesACommand: 'kdbtool help check' printed the general usage,
// not check's, and 'kdbtool help bogus' exited 0. help COMMAND prints the
// command's own usage (as 'COMMAND -h'), exit 0; an unknown or hidden
// command is exit 2, "unknown command", with the general usage.
//
// Help asked for ('help', 'help COMMAND', 'COMMAND -h', '-h') went to
// stderr, so 'kdbtool help | less' showed nothing, and 'help help' was an
// unknown command: help asked for is on stdout (stderr empty), exit 0, and
// 'help help' is the general usage; a usage error still prints the usage
// on stderr, exit 2.
func TestHelp_NamesACommand(t *testing.T) {
	for name, c := range commands {
		if c.hidden {
			continue
		}
		code, stdout, stderr := runTool(t, "help", name)
		_, dashH, dashHErr := runTool(t, name, "-h")
		_, dashHelp, _ := runTool(t, name, "--help")
		if code != exitOK || stderr != "" || dashHErr != "" || !strings.HasPrefix(stdout, "usage: kdbtool "+name+" ") || stdout != dashH || stdout != dashHelp {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q; want exit 0 and on stdout what %s -h prints, %q (stderr %q)", name, code, stdout, stderr, name, dashH, dashHErr)
		}
		// A usage error of the command prints its usage on stderr.
		code, stdout, stderr = runTool(t, name, "--no-such-flag")
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "usage: kdbtool "+name+" ") {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", name, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "bogus"}, {"help", "demo-child"}, {"help", "check", "inspect"}} {
		code, stdout, stderr := runTool(t, args...)
		want := `kdbtool help: unknown command "` + args[1] + `"`
		if len(args) > 2 {
			want = "kdbtool help: want at most one command, got 2"
		}
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, want+"\n") || !strings.Contains(stderr, "usage: kdbtool <command>") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying %q, then the usage", args, code, stdout, stderr, want)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"-h"}, {"--help"}} {
		if code, stdout, stderr := runTool(t, args...); code != exitOK || !strings.HasPrefix(stdout, "usage: kdbtool <command>") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and the general usage on stdout", args, code, stdout, stderr)
		}
	}
}

// TestArgs_WrongCountSaysWhy: the wrong number of positional arguments
// without --json printed only the usage, no reason (the reason went only
// into the --json document). The reason comes first, then the usage.
func TestArgs_WrongCountSaysWhy(t *testing.T) {
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"check"}, "want one DIR argument, got 0"},
		{[]string{"check", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"inspect", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"recover", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"repair", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"dump", "--index", "x", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"stress", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"verify", "--acked", "f", "a", "b"}, "want one DIR argument, got 2"},
		{[]string{"export", "a"}, "want DIR FILE, got 1 arguments"},
		{[]string{"import", "a", "b", "c"}, "want FILE DIR, got 3 arguments"},
		{[]string{"demo", "a", "b"}, "want at most one DIR argument, got 2"},
	} {
		code, stdout, stderr := runTool(t, c.args...)
		want := "kdbtool " + c.args[0] + ": " + c.why + "\nusage: kdbtool " + c.args[0] + " "
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, the reason %q, then the usage", c.args, code, stdout, stderr, c.why)
		}
	}
}
