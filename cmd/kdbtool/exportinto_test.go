package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExport_RefusesFileInsideTheStore: export is read-only, but its FILE
// is renamed into place, so a FILE in the store's own directory replaced
// one of the store's files: 'kdbtool export DIR DIR/db.data' exited 0 and
// left a store that no longer opens (db.data@8: bad magic). A FILE in DIR,
// named directly, through a symbolic link to DIR, or through a link to
// one of its files, is refused and the store left as it was.
func TestExport_RefusesFileInsideTheStore(t *testing.T) {
	dir := makeStore(t, 10)
	before := snapshotFiles(t, dir)
	other := t.TempDir()
	dirLink := filepath.Join(other, "storelink")
	if err := os.Symlink(dir, dirLink); err != nil {
		t.Fatal(err)
	}
	fileLink := filepath.Join(other, "datalink")
	if err := os.Symlink(filepath.Join(dir, "db.data"), fileLink); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{
		filepath.Join(dir, "db.data"),
		filepath.Join(dir, "snap.kdbx"),
		filepath.Join(dirLink, "db.free"),
		fileLink,
	} {
		code, _, errs := runTool(t, "export", dir, file)
		if code != exitUsage || !strings.Contains(errs, "inside the store") {
			t.Errorf("export %s %s: exit %d, stderr %q; want a usage error: FILE is inside the store's directory", dir, file, code, errs)
		}
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
	// Through the link to the store, DIR itself is the same directory.
	if code, _, errs := runTool(t, "export", dirLink, filepath.Join(dir, "x")); code != exitUsage {
		t.Errorf("export through a link to DIR into DIR: exit %d: %s", code, errs)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
}
