package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runChildTimeout runs the test binary as kdbtool in a child process and
// kills it after d: for commands that, broken, would never stop.
func runChildTimeout(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kdbtool %q did not stop within %v (killed)\nstderr: %s", args, d, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestFlags_BadNumbersAreUsageErrors: a negative, zero or absurd value of
// any numeric flag of any subcommand is a usage error (exit 2) that names
// the flag and its value and says what it wants, prints the usage, and
// creates nothing. demo runs in a child process with a timeout: with a
// negative --size-mib it used to write without end.
func TestFlags_BadNumbersAreUsageErrors(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"demo", "-size-mib", "-3", dir}, "--size-mib -3: want 1 to 16384"},
		{[]string{"demo", "-size-mib", "0", dir}, "--size-mib 0: want 1 to 16384"},
		{[]string{"demo", "-size-mib", "99999999", dir}, "--size-mib 99999999: want 1 to 16384"},
		{[]string{"demo-child", "-size-mib", "-3", dir}, "--size-mib -3: want 1 to 16384"},
		{[]string{"dump", "--index", "stress", "--limit", "-5", dir}, "--limit -5: want 0 (all) or more"},
		{[]string{"stress", "--segment-size", "100", dir}, "--segment-size 100: want 0 (the default, 32 MiB) or 65536 (64 KiB) to 1073741824 (1 GiB)"},
		{[]string{"stress", "--segment-size", "-1", dir}, "--segment-size -1: want"},
		{[]string{"stress", "--segment-size", "2147483648", dir}, "--segment-size 2147483648: want"},
		{[]string{"stress", "--size", "-1", dir}, "--size -1: want 0 to 8388608 bytes"},
		{[]string{"stress", "--size", "9000000", dir}, "--size 9000000: want 0 to 8388608 bytes"},
		{[]string{"stress", "--writers", "0", dir}, "--writers 0: want 1 to 1024"},
		{[]string{"stress", "--writers", "-4", dir}, "--writers -4: want 1 to 1024"},
		{[]string{"stress", "--writers", "1000000", dir}, "--writers 1000000: want 1 to 1024"},
		{[]string{"stress", "--count", "-1", dir}, "--count -1: want 0"},
		{[]string{"stress", "--duration", "-1s", dir}, "--duration -1s: want 0"},
		{[]string{"stress", "--index", "", dir}, "--index is empty"},
		{[]string{"verify", "--acked", "f", "--index", "", dir}, "--index is empty"},
	} {
		var code int
		var out, errs string
		if strings.HasPrefix(tc.args[0], "demo") {
			code, out, errs = runChildTimeout(t, 20*time.Second, tc.args...)
		} else {
			code, out, errs = runTool(t, tc.args...)
		}
		if code != exitUsage || !strings.Contains(errs, "kdbtool "+tc.args[0]+": "+tc.msg) ||
			!strings.Contains(errs, "usage: kdbtool "+tc.args[0]) || out != "" {
			t.Errorf("%q: exit %d, want 2 saying %q; stdout %q, stderr:\n%s", tc.args, code, tc.msg, out, errs)
		}
	}
	for _, d := range []string{dir, dir + "-scan"} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("a usage error created %s: %v", d, err)
		}
	}
	// The bounds themselves are accepted.
	ok := t.TempDir()
	if code, _, errs := runTool(t, "stress", "--segment-size", "65536", "--writers", "1", "--size", "0", "--count", "3", ok); code != 0 {
		t.Errorf("stress at the lower bounds: exit %d: %s", code, errs)
	}
	if code, _, errs := runTool(t, "dump", "--index", "stress", "--limit", "0", ok); code != 0 {
		t.Errorf("dump --limit 0: exit %d: %s", code, errs)
	}
}

// TestFlags_EmptyPathIsUsageError: an empty DIR or FILE argument is a
// usage error (exit 2) for every subcommand, never the current directory:
// nothing is created there.
func TestFlags_EmptyPathIsUsageError(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	file := filepath.Join(t.TempDir(), "f")
	store := makeStore(t, 10)
	for _, tc := range []struct {
		args []string
		what string
	}{
		{[]string{"stress", "--count", "3", ""}, "DIR"},
		{[]string{"verify", "--acked", file, ""}, "DIR"},
		{[]string{"inspect", ""}, "DIR"},
		{[]string{"check", ""}, "DIR"},
		{[]string{"recover", ""}, "DIR"},
		{[]string{"repair", "--apply", ""}, "DIR"},
		{[]string{"dump", "--index", "x", ""}, "DIR"},
		{[]string{"export", "", file}, "DIR"},
		{[]string{"export", store, ""}, "FILE"},
		{[]string{"import", "", filepath.Join(t.TempDir(), "x")}, "FILE"},
		{[]string{"import", file, ""}, "DIR"},
		{[]string{"demo", ""}, "DIR"},
		{[]string{"demo-child", ""}, "DIR"},
	} {
		var code int
		var out, errs string
		if strings.HasPrefix(tc.args[0], "demo") {
			code, out, errs = runChildTimeout(t, 20*time.Second, tc.args...)
		} else {
			code, out, errs = runTool(t, tc.args...)
		}
		if code != exitUsage || !strings.Contains(errs, "kdbtool "+tc.args[0]+": "+tc.what+" is empty") || out != "" {
			t.Errorf("%q: exit %d, want 2 saying %s is empty; stdout %q, stderr:\n%s", tc.args, code, tc.what, out, errs)
		}
	}
	if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
		t.Errorf("an empty path argument wrote into the current directory: %v", ents)
	}
}

// TestDemo_DeletesOnlyAStore: the demo deletes and rebuilds DIR and
// DIR-scan; a DIR holding anything but a store's files ("kdbtool demo ~")
// is refused with exit 2 and left as it was.
func TestDemo_DeletesOnlyAStore(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	home := filepath.Join(root, "home")
	if err := os.MkdirAll(filepath.Join(home, "photos"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	scanSide := filepath.Join(root, "other")
	if err := os.MkdirAll(scanSide+"-scan", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scanSide+"-scan", "thesis.tex"), []byte("keep me too"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{home, scanSide} {
		code, _, stderr := runChildTimeout(t, 30*time.Second, "demo", "-size-mib", "1", dir)
		if code != 2 || !strings.Contains(stderr, "not a store's file") {
			t.Fatalf("demo %s: exit %d, stderr %q; want 2 refusing it", dir, code, stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, "notes.txt")); err != nil || string(b) != "keep me" {
		t.Fatalf("demo deleted or changed %s: %v", home, err)
	}
	if _, err := os.Stat(filepath.Join(scanSide+"-scan", "thesis.tex")); err != nil {
		t.Fatalf("demo deleted %s-scan: %v", scanSide, err)
	}
}
