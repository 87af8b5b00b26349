package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestInterspersed(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool("json", false, "")
		fs.String("acked", "", "")
		fs.Int("limit", 0, "")
		return fs
	}
	for _, tc := range []struct {
		args     []string
		pos      []string
		json     string
		acked    string
		limit    string
		parseErr string
	}{
		{args: []string{"--acked", "F", "D"}, pos: []string{"D"}, acked: "F"},
		{args: []string{"D", "--acked", "F"}, pos: []string{"D"}, acked: "F"},
		{args: []string{"D", "-acked", "F", "--json"}, pos: []string{"D"}, acked: "F", json: "true"},
		{args: []string{"D", "--acked=F", "E", "-limit=3"}, pos: []string{"D", "E"}, acked: "F", limit: "3"},
		{args: []string{"D", "--json=false", "E"}, pos: []string{"D", "E"}, json: "false"},
		// A value that looks like a flag is still the value.
		{args: []string{"D", "--acked", "--json"}, pos: []string{"D"}, acked: "--json"},
		{args: []string{"D", "--acked", "-"}, pos: []string{"D"}, acked: "-"},
		// "-" alone is positional; "--" ends the flags.
		{args: []string{"-", "--json"}, pos: []string{"-"}, json: "true"},
		{args: []string{"--json", "--", "--acked", "x", "-y"}, pos: []string{"--acked", "x", "-y"}, json: "true"},
		{args: []string{"D", "--", "--"}, pos: []string{"D", "--"}},
		// A bool flag takes no separate value.
		{args: []string{"--json", "false", "D"}, pos: []string{"false", "D"}, json: "true"},
		// Errors are fs.Parse's own.
		{args: []string{"D", "--nope"}, parseErr: "flag provided but not defined: -nope"},
		{args: []string{"D", "--nope=1"}, parseErr: "flag provided but not defined: -nope"},
		{args: []string{"D", "--acked"}, parseErr: "flag needs an argument: -acked"},
		{args: []string{"D", "--limit", "x"}, parseErr: "invalid value"},
		{args: []string{"D", "---json"}, parseErr: "bad flag syntax"},
	} {
		fs := newFS()
		err := fs.Parse(interspersed(fs, tc.args))
		if tc.parseErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.parseErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if got := fs.Args(); !reflect.DeepEqual(got, tc.pos) && !(len(got) == 0 && len(tc.pos) == 0) {
			t.Errorf("%q: positional %q, want %q", tc.args, got, tc.pos)
		}
		for name, want := range map[string]string{"json": tc.json, "acked": tc.acked, "limit": tc.limit} {
			if want == "" {
				want = fs.Lookup(name).DefValue
			}
			if got := fs.Lookup(name).Value.String(); got != want {
				t.Errorf("%q: --%s = %q, want %q", tc.args, name, got, want)
			}
		}
	}
}

// TestFlagsEitherOrder runs subcommands with their flags before and after
// the positional arguments (and in the --flag=value, -flag value forms):
// the outputs must be the same.
func TestFlagsEitherOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, keys, errs := runTool(t, "stress", dir, "--count", "40", "--writers=2", "-size", "100", "--index", "either")
	if code != 0 || len(strings.Fields(keys)) != 40 {
		t.Fatalf("stress with flags after DIR: exit %d, %d keys: %s", code, len(strings.Fields(keys)), errs)
	}
	acked := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(acked, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	export1 := filepath.Join(t.TempDir(), "a.export")
	export2 := filepath.Join(t.TempDir(), "b.export")
	for _, tc := range []struct {
		name          string
		before, after []string
		same          bool // the two runs print the same stdout
	}{
		{"verify", []string{"verify", "--json", "--acked", acked, "--index", "either", dir},
			[]string{"verify", dir, "--acked", acked, "--json", "-index=either"}, true},
		{"dump", []string{"dump", "--index", "either", "--limit", "5", "--values", dir},
			[]string{"dump", dir, "--index=either", "-limit", "5", "--values"}, true},
		{"check", []string{"check", "--json", dir}, []string{"check", dir, "--json"}, true},
		{"inspect", []string{"inspect", "--json", dir}, []string{"inspect", dir, "-json"}, true},
		{"export", []string{"export", "--json", dir, export1}, []string{"export", dir, "--json", export2}, false},
		{"repair", []string{"repair", "--json", dir}, []string{"repair", dir, "--json"}, true},
		{"recover", []string{"recover", "--json", "--force-scan", dir},
			[]string{"recover", dir, "--force-scan", "--json"}, false},
	} {
		c1, out1, e1 := runTool(t, tc.before...)
		c2, out2, e2 := runTool(t, tc.after...)
		if c1 != exitOK || c2 != exitOK {
			t.Errorf("%s: exit %d (flags first) and %d (flags last)\n%s\n%s", tc.name, c1, c2, e1, e2)
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(out2), "{") && strings.Contains(strings.Join(tc.after, " "), "json") {
			t.Errorf("%s: --json after DIR ignored:\n%s", tc.name, out2)
		}
		if tc.same && out1 != out2 {
			t.Errorf("%s: outputs differ\nflags first:\n%s\nflags last:\n%s", tc.name, out1, out2)
		}
	}
	// verify really read --acked from after DIR: a missing key is named.
	if err := os.WriteFile(acked, []byte(keys+"never-written\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runTool(t, "verify", dir, "--index", "either", "--acked", acked)
	if code != exitProblems || !strings.Contains(out, "missing: never-written\n") {
		t.Errorf("verify DIR --acked FILE with a missing key: exit %d\n%s", code, out)
	}
	// Both exports hold the same store: import (FILE DIR) in both orders.
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if code, _, errs := runTool(t, "import", "--json", export1, a); code != exitOK {
		t.Fatalf("import flags first: exit %d %s", code, errs)
	}
	if code, _, errs := runTool(t, "import", export2, b, "--json"); code != exitOK {
		t.Fatalf("import flags last: exit %d %s", code, errs)
	}
	_, da, _ := runTool(t, "dump", "--index", "either", "--limit", "0", "--values", a)
	_, db, _ := runTool(t, "dump", b, "--index", "either", "--limit", "0", "--values")
	if strings.Count(da, "\n") != 40 || da != db {
		t.Errorf("imports differ or are short: %d lines vs %d", strings.Count(da, "\n"), strings.Count(db, "\n"))
	}
}

// TestFlagsBadAfterDir: a bad flag after DIR is a usage error (exit 2) that
// names the flag and prints the subcommand's usage; nothing is opened.
func TestFlagsBadAfterDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{
		{"verify", dir, "--acked", "f", "--bogus"},
		{"check", dir, "--bogus=1"},
		{"dump", dir, "--index", "x", "-bogus"},
		{"inspect", dir, "--json", "--bogus"},
		{"recover", dir, "--bogus"},
		{"repair", dir, "--bogus"},
		{"export", dir, "file", "--bogus"},
		{"stress", dir, "--bogus"},
	} {
		code, out, errs := runTool(t, args...)
		if code != exitUsage || !strings.Contains(errs, "flag provided but not defined: -bogus") ||
			!strings.Contains(errs, "usage: kdbtool "+args[0]) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, code, out, errs)
		}
	}
	// A flag missing its value at the end, a bad value, two DIRs.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"verify", dir, "--acked"}, "flag needs an argument: -acked"},
		{[]string{"dump", dir, "--limit", "many"}, "invalid value"},
		{[]string{"check", dir, "--json", dir}, "usage: kdbtool check"},
	} {
		code, _, errs := runTool(t, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.msg) {
			t.Errorf("%q: exit %d, stderr:\n%s", tc.args, code, errs)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a usage error created %s: %v", dir, err)
	}
	// -h after DIR is help, exit 0.
	if code, out, _ := runTool(t, "check", dir, "-h"); code != exitOK || !strings.Contains(out, "usage: kdbtool check") {
		t.Errorf("check DIR -h: exit %d\n%s", code, out)
	}
}
