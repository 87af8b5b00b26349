package main

// Added by mutation testing of kdbtool's exit codes (main.go run): the
// usage errors of the command line itself failed no test when changed.

import (
	"strings"
	"testing"
)

// TestMut_CommandLineUsage guards run's exit codes: no command, and an
// unknown one, are usage errors (exit 2) that print the usage; help is
// exit 0.
func TestMut_CommandLineUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, exitUsage},
		{[]string{"nosuchcommand"}, exitUsage},
		{[]string{"nosuchcommand", t.TempDir()}, exitUsage},
		{[]string{"help"}, exitOK},
		{[]string{"-h"}, exitOK},
	} {
		code, out, errs := runTool(t, c.args...)
		// Help asked for is on stdout; the usage of a usage error on stderr.
		if c.code == exitOK {
			out, errs = errs, out
		}
		if code != c.code || !strings.Contains(errs, "usage: kdbtool <command>") || out != "" {
			t.Errorf("kdbtool %q: exit %d, want %d and the usage (on stdout for help, else on stderr)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errs)
		}
	}
}
