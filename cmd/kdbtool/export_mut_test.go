package main

// Added by mutation testing of kdbtool's exit codes: no test gave import
// a snapshot of another format version, so dropping kdb.ErrVersionMismatch
// from the errors about the bytes on disk (output.go isCorrupt, and
// export.go runImport's own case) failed no test.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMut_ImportOfANewerSnapshotIsExit1 guards both (each alone is
// enough, so the test fails only when both are gone): a snapshot of a format version this build does
// not read is a problem of the file (exit 1, as a damaged or truncated
// one), not an I/O error (exit 3), and no store is left at the target.
func TestMut_ImportOfANewerSnapshotIsExit1(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 20)
	file := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", dir, file); code != exitOK {
		t.Fatalf("export: exit %d %s", code, errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[4]++ // the snapshot's format version (u32 LE after the magic)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "imported")
	code, _, errs := runTool(t, "import", file, target)
	if code != exitProblems || !strings.Contains(errs, "version") {
		t.Fatalf("import of a snapshot of version 2: exit %d, want %d\n%s", code, exitProblems, errs)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("import of a refused snapshot left %s (%v)", target, err)
	}
}
