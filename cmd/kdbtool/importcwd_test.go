package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImport_RefusesCurrentDir: 'kdbtool import FILE .' in an empty
// current directory built the store, renamed it over the directory the
// shell stood in and then reported exit 3, "open .: getwd: no such file or
// directory" (an outside tester's script): kdb.Import refuses "." itself,
// but kdbtool gave it an absolute name. Now "." and "..", and any DIR that
// is the current directory or one of its parents however it is named
// (relative, absolute, through a symbolic link), are a usage error (exit 2)
// with kdb.Import's advice, before anything is done: the directory is left
// as it was, empty, and nothing is created beside it. A new directory
// beside it is still imported into.
func TestImport_RefusesCurrentDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", makeStore(t, 20), file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	root := t.TempDir()
	here := filepath.Join(root, "up", "here")
	if err := os.MkdirAll(here, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(here, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	importIn := func(dir string) (int, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "import", file, dir)
		cmd.Dir = here
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), errb.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, errb.String()
	}
	for _, dir := range []string{".", "./", "..", "../here", "../..", here, filepath.Join(root, "up"), filepath.Join(root, "link"), "sub/.."} {
		code, errs := importIn(dir)
		if code != exitUsage || !strings.Contains(errs, "is the current directory or one of its parents") ||
			!strings.Contains(errs, "name a new directory (or an empty one by its name)") {
			t.Errorf("import %s from %s: exit %d, stderr %q; want exit %d refusing the current directory", dir, here, code, errs, exitUsage)
		}
		if names := dirNames(t, here); len(names) != 0 {
			t.Fatalf("import %s from %s: it holds %q now; want it left empty", dir, here, names)
		}
		if names := dirNames(t, filepath.Join(root, "up")); len(names) != 1 {
			t.Fatalf("import %s from %s: %s holds %q now; want only here", dir, here, filepath.Join(root, "up"), names)
		}
	}
	if code, errs := importIn("new"); code != exitOK {
		t.Fatalf("import into a new directory inside the current one: exit %d: %s", code, errs)
	}
	if code, _, errs := runTool(t, "check", filepath.Join(here, "new")); code != exitOK {
		t.Errorf("check of the imported store: exit %d: %s", code, errs)
	}
}
