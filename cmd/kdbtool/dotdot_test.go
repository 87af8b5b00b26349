package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestDirArg_DotDotAfterALink: a DIR spelled through a symbolic link and
// ".." (outer/up -> ../b, DIR outer/up/../b) names the directory the kernel
// resolves, b, not outer/b, which cleaning the name as text gives. Every
// command works on that one directory: inspect and check read db.data and
// the journal of the same store (they mixed outer/b's db.data with b's
// journal, and reported damage), dump reads it, import refuses it (it
// holds a store), and kdb.Open opens it.
func TestDirArg_DotDotAfterALink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "outer"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(makeStore(t, 300), filepath.Join(root, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(makeStore(t, 4000), filepath.Join(root, "outer", "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../b", filepath.Join(root, "outer", "up")); err != nil {
		t.Fatal(err)
	}
	dir := root + "/outer/up/../b" // not filepath.Join: it cleans as text
	before := snapshotFiles(t, filepath.Join(root, "b"))

	for _, cmd := range []string{"inspect", "check"} {
		if code, m := runJSON(t, cmd, "--json", dir); code != exitOK {
			t.Errorf("%s %s: exit %d: %v", cmd, dir, code, m["problems"])
		}
	}
	code, out, errs := runTool(t, "dump", "--limit", "0", "--index", "users", dir)
	if code != exitOK || strings.Count(out, "user-") != 300 {
		t.Errorf("dump %s: exit %d, %d keys (stderr %q): want b's 300", dir, code, strings.Count(out, "user-"), errs)
	}
	requireSameFiles(t, before, snapshotFiles(t, filepath.Join(root, "b")))

	snap := filepath.Join(t.TempDir(), "s.kdbx")
	if code, _, errs := runTool(t, "export", filepath.Join(root, "b"), snap); code != exitOK {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	if code, _, errs := runTool(t, "import", snap, dir); code != exitProblems || !strings.Contains(errs, "already holds a store") {
		t.Errorf("import into %s (b holds a store): exit %d, stderr %q", dir, code, errs)
	}
	// export's FILE through the same link into the store is refused.
	if code, _, errs := runTool(t, "export", dir, root+"/outer/up/../b/db.free"); code != exitUsage || !strings.Contains(errs, "inside the store") {
		t.Errorf("export into the store through the link: exit %d, stderr %q", code, errs)
	}

	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Get("users", []byte("user-00299"))
	_, err2 := db.Get("users", []byte("user-00300"))
	if cerr := db.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil || err2 == nil {
		t.Errorf("kdb.Open(%s) opened outer/b, not b: user-00299 %v, user-00300 %v", dir, err, err2)
	}
}
