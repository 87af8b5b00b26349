package main

import (
	"strings"
	"testing"
)

// TestHelp_NamesACommand: 'kdbtool help check' printed the general usage,
// not check's, and 'kdbtool help bogus' exited 0. help COMMAND prints the
// command's own usage (as 'COMMAND -h'), exit 0; an unknown or hidden
// command is exit 2, "unknown command", with the general usage.
func TestHelp_NamesACommand(t *testing.T) {
	for name, c := range commands {
		if c.hidden {
			continue
		}
		code, stdout, stderr := runTool(t, "help", name)
		_, _, dashH := runTool(t, name, "-h")
		if code != exitOK || stdout != "" || !strings.HasPrefix(stderr, "usage: kdbtool "+name+" ") || stderr != dashH {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q; want exit 0 and what %s -h prints, %q", name, code, stdout, stderr, name, dashH)
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
	if code, _, stderr := runTool(t, "help"); code != exitOK || !strings.HasPrefix(stderr, "usage: kdbtool <command>") {
		t.Errorf("help: exit %d, stderr %q; want exit 0 and the general usage", code, stderr)
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
