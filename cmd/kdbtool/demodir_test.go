package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestDemo_TrailingSlashKeepsTheScanCopyBeside: 'kdbtool demo myd3/' made
// its scan copy "myd3/" + "-scan", a directory inside the store, and the
// next 'demo myd3/' refused the store it had built (exit 2, "myd3 holds
// -scan, which is not a store's file"). DIR is cleaned first: the copy is
// myd3-scan, beside it, and the demo runs again.
func TestDemo_TrailingSlashKeepsTheScanCopyBeside(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "myd3")
	for i := range 2 {
		code, stdout, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir+"/")
		if code != exitOK || !strings.Contains(stdout, "missing: 0") {
			t.Fatalf("demo run %d into %s/: exit %d, stdout %q, stderr %q", i+1, dir, code, stdout, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "-scan")); err == nil {
			t.Fatalf("demo run %d into %s/ made its scan copy inside the store, %s/-scan", i+1, dir, dir)
		}
		if _, err := os.Stat(filepath.Join(dir+"-scan", demoMark)); err != nil {
			t.Fatalf("demo run %d into %s/: no scan copy beside it: %v", i+1, dir, err)
		}
	}
}

// TestDemo_RefusesDotPaths: 'kdbtool demo .' in an empty directory, and
// 'demo myd5/.', failed with "RemoveAll .: invalid argument", exit 3,
// leaving a lock file ('demo myd5/..' built its store in the directory it
// ran in). A DIR whose last element is "." or ".." is now a usage error
// (exit 2) that says so, before anything is created, and the message for
// an empty DIR no longer offers "." (which demo refuses).
//
// The demo runs as a child process in the empty directory (a demo that
// went on would start its writer, which only a child can run).
func TestDemo_RefusesDotPaths(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o750); err != nil {
		t.Fatal(err)
	}
	demoIn := func(args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"demo", "-size-mib", "1"}, args...)...)
		cmd.Dir = empty
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if ctx.Err() != nil {
			t.Fatalf("demo %q did not stop within 2 minutes (killed)", args)
		} else if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errb.String()
	}
	for _, dir := range []string{".", "./", filepath.Join(root, "myd5") + "/.", "myd5/.", "myd5/..", empty + "/.", "", empty, root, "../empty"} {
		code, stdout, stderr := demoIn(dir)
		want := `ends in "."`
		if dir == empty || dir == root || dir == "../empty" {
			// The current directory (or a parent) by its name: the demo
			// would delete the directory the shell stands in.
			want = "is the current directory or one of its parents"
		} else if strings.HasSuffix(dir, "..") {
			want = `ends in ".."`
		} else if dir == "" {
			want = "DIR is empty: name a new directory"
		}
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "kdbtool demo: ") || !strings.Contains(stderr, want) ||
			!strings.Contains(stderr, "usage: kdbtool demo") || strings.Contains(stderr, ". for the current one") {
			t.Errorf("demo %q: exit %d, stdout %q, stderr %q; want exit 2 saying %s, and the usage", dir, code, stdout, stderr, want)
		}
		code, stdout, _ = demoIn("--json", dir)
		if !strings.Contains(stdout, `"error": `) || !strings.Contains(stdout, strings.ReplaceAll(want, `"`, `\"`)) || code != exitUsage {
			t.Errorf("demo --json %q: exit %d, stdout %q; want exit 2 and an error saying %s", dir, code, stdout, want)
		}
	}
	for _, d := range []string{empty, root} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if d == root && len(ents) == 1 && ents[0].Name() == "empty" {
			continue
		}
		if d == empty && len(ents) == 0 {
			continue
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("after the refused demos %s holds %q", d, names)
	}
}

// TestDemo_RefusesAnAppIndexNamedDemo: a store made by an application
// with db.Put("demo", "customer-42", ...) and no KDBTOOL-DEMO mark was
// taken for an older demo's (only a "demo" index, no namespace), deleted
// and rebuilt: exit 0 and the key gone. The README promises that 'kdbtool
// demo /var/lib/broker/store' leaves an application's store alone, and
// stress refuses such a store. Only a store whose demo index holds records
// of the demo's own form (8-byte keys, 16 KiB values) is an older demo's;
// this one is refused with exit 2 and left as it was.
func TestDemo_RefusesAnAppIndexNamedDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "appstore")
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("demo", []byte("customer-42"), []byte(`{"plan": "gold"}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileStates(t, dir)
	code, stdout, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
	if code != exitUsage || !strings.Contains(stderr, "kdbtool demo did not build") {
		t.Errorf("demo over an application's store whose index is named demo: exit %d, stdout %q, stderr %q; want exit 2 refusing it", code, stdout, stderr)
	}
	requireUntouched(t, "demo", before, fileStates(t, dir))
	if db, err = kdb.Open(dir, &kdb.Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Get("demo", []byte("customer-42")); err != nil || string(v) != `{"plan": "gold"}` {
		t.Errorf("the application's key after demo: %q, %v", v, err)
	}
}

// TestDemo_HelpShowsARandomSeed: 'kdbtool demo -h' showed the default of
// -seed as a number that changed on every call (the time of the call).
// It says "random", and a -seed given is still taken.
func TestDemo_HelpShowsARandomSeed(t *testing.T) {
	_, first, _ := runTool(t, "demo", "-h")
	_, second, _ := runTool(t, "demo", "-h")
	if first != second || !strings.Contains(first, "(default random)") {
		t.Errorf("demo -h twice:\n%s\n---\n%s\nwant the same text, the seed's default said as random", first, second)
	}
	if code, _, stderr := runTool(t, "demo", "-seed", "nope", "-size-mib", "0"); code != exitUsage || !strings.Contains(stderr, `invalid value "nope" for flag -seed`) {
		t.Errorf("demo -seed nope: exit %d, stderr %q; want exit 2 refusing the seed", code, stderr)
	}
	if code, _, stderr := runTool(t, "demo", "-seed", "42", "-size-mib", "0"); code != exitUsage || !strings.Contains(stderr, "--size-mib 0") {
		t.Errorf("demo -seed 42 -size-mib 0: exit %d, stderr %q; want the seed taken and -size-mib refused", code, stderr)
	}
}

// TestDemo_SeedMakesTheKillMomentReproducible: -seed N sets how long the
// writer goes on once the store is built before it is killed
// (demoKillDelay, drawn from the seed alone: every run with one seed waits
// as long); the demo reports the seed and that wait. -seed was once taken
// and then not used.
func TestDemo_SeedMakesTheKillMomentReproducible(t *testing.T) {
	t.Parallel()
	const seed = 39 // a wait of 214 ms: a quick test
	if a, b := demoKillDelay(seed), demoKillDelay(seed); a != b || a == demoKillDelay(seed+1) {
		t.Fatalf("demoKillDelay(%d): %v then %v, and %v for seed %d: want one wait per seed", seed, a, b, demoKillDelay(seed+1), seed+1)
	}
	dir := filepath.Join(t.TempDir(), "d")
	code, stdout, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", "-seed", "39", "-json", dir)
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || code != exitOK {
		t.Fatalf("demo: exit %d, %v\nstdout %s\nstderr %s", code, err, stdout, stderr)
	}
	if want := demoKillDelay(seed).String(); m["seed"] != float64(seed) || m["kill_delay"] != want {
		t.Errorf("demo -seed %d: seed %v, kill_delay %v; want %d and %s", seed, m["seed"], m["kill_delay"], seed, want)
	}
}

// TestDemo_KeysMissingAfterTheScanIsExit1: a key acknowledged by the
// writer and missing after the forced-scan reopen (here the test empties
// that copy) fails the demo (exit 1), as one missing after the trusted
// reopen does.
func TestDemo_KeysMissingAfterTheScanIsExit1(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "d")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "demo", "-size-mib", "1", "-seed", "39", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_DEMO_LOSE_SCAN=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitProblems || !strings.Contains(errb.String(), "acknowledged keys are missing") ||
		!strings.Contains(out.String(), "missing: 0 (trusted) and ") || strings.Contains(out.String(), "and 0 (scan)") {
		t.Fatalf("demo with the scan copy emptied: %v; want exit 1 and its keys missing (scan)\nstdout %s\nstderr %s", err, out.String(), errb.String())
	}
}
