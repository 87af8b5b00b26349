package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dirNames lists every name in dir (directories and hidden files too).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestImport_RefusesDirInsideAStore: 'kdbtool import SNAP store/sub'
// exited 0 and put a second store (with its claim lock and temporary
// directory) inside the first one's directory, and 'import SNAP
// store/a/b' created store/a for it. A DIR whose parent, or any directory
// above it, holds a store is a usage error (exit 2) naming that store,
// named directly, relative to the current directory, or through a link
// to the store's directory; nothing is created in the store's directory.
func TestImport_RefusesDirInsideAStore(t *testing.T) {
	store := makeStore(t, 10)
	file := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", store, file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	// store's path as the import resolves it (t.TempDir may be under a link).
	real, err := filepath.EvalSymlinks(store)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(store, link); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, store)
	for _, dir := range []string{
		filepath.Join(store, "sub"),
		filepath.Join(store, "a", "b"),
		filepath.Join(link, "sub"),
		filepath.Join(store, "x", "..", "y"),
	} {
		code, _, errs := runTool(t, "import", file, dir)
		if code != exitUsage || !strings.Contains(errs, "inside the store "+real) {
			t.Errorf("import %s: exit %d, stderr %q; want a usage error: DIR is inside the store %s", dir, code, errs, real)
		}
	}
	t.Chdir(store)
	if code, _, errs := runTool(t, "import", file, "sub"); code != exitUsage || !strings.Contains(errs, "inside the store") {
		t.Errorf("import into sub from the store's directory: exit %d, stderr %q; want a usage error", code, errs)
	}
	if after := dirNames(t, store); !slices.Equal(before, after) {
		t.Errorf("the store's directory holds %v, had %v", after, before)
	}
	if code, out, errs := runTool(t, "check", store); code != 0 {
		t.Errorf("check of the store: exit %d\n%s%s", code, out, errs)
	}
	// A directory beside the store is fine.
	if code, _, errs := runTool(t, "import", file, filepath.Join(filepath.Dir(store), "beside")); code != 0 {
		t.Errorf("import beside the store: exit %d: %s", code, errs)
	}
}
