package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// fileStates returns every file's bytes and modification time in dir, so
// that a test sees a rewrite with the same bytes too.
func fileStates(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for n, b := range snapshotFiles(t, dir) {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		m[n] = string(b) + "\x00" + st.ModTime().Format(time.RFC3339Nano)
	}
	return m
}

func requireUntouched(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for n, b := range before {
		if a, ok := after[n]; !ok {
			t.Errorf("%s: %s removed or moved", what, n)
		} else if a != b {
			t.Errorf("%s: %s changed", what, n)
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Errorf("%s: %s created", what, n)
		}
	}
}

// TestRepair_ApplyOnLiveStoreIsLocked: repair --apply, every variant, on a
// store another handle holds gets ErrLocked and touches nothing: no file
// read-moved, rewritten or created (no .broken copy).
func TestRepair_ApplyOnLiveStoreIsLocked(t *testing.T) {
	t.Parallel()
	variants := [][]string{{"--apply"}, {"--apply", "--rebuild-index"}}

	// A live store: a writable handle of this process holds it (flock
	// locks belong to the open file description, so the tool's own Lock
	// conflicts as another process's would).
	dir := makeStore(t, 300)
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := fileStates(t, dir)
	time.Sleep(20 * time.Millisecond) // a rewrite would show in the mtimes
	for _, v := range variants {
		args := append(append([]string{"repair"}, v...), dir)
		code, out, errs := runTool(t, args...)
		if code != exitIO || !strings.Contains(errs, "locked") {
			t.Errorf("%v on a live store: exit %d, stderr %q, want exit %d and locked", args, code, errs, exitIO)
		}
		if out != "" {
			t.Errorf("%v: printed %q", args, out)
		}
		requireUntouched(t, strings.Join(args, " "), before, fileStates(t, dir))
	}

	// A store with something to repair (a stale db.free), its lock held
	// as a live process holds it: still nothing is touched.
	dir = makeStore(t, 300)
	staleFree(t, dir)
	lk, err := vfs.OS.Lock(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	before = fileStates(t, dir)
	for _, v := range variants {
		args := append(append([]string{"repair", "--json"}, v...), dir)
		code, _, errs := runTool(t, args...)
		if code != exitIO || !strings.Contains(errs, kdb.ErrLocked.Error()) {
			t.Errorf("%v with the lock held: exit %d, stderr %q", args, code, errs)
		}
		requireUntouched(t, strings.Join(args, " "), before, fileStates(t, dir))
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	// Released, the repair runs (under its own lock, which kdb.Open shares).
	code, m := runJSON(t, "repair", "--json", "--apply", dir)
	if code != 0 || jget(t, m, "after.free_list_matches_meta") != true {
		t.Errorf("repair --apply after the lock was released: exit %d, %v", code, m)
	}
	// And the lock is released again at the end.
	lk, err = vfs.OS.Lock(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatalf("lock after repair: %v", err)
	}
	lk.Close()
}

// TestRepair_ApplyOnNonStoreCreatesNothing: repair --apply in a directory
// that is not a store exits 3 and leaves no lock file behind.
func TestRepair_ApplyOnNonStoreCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, errs := runTool(t, "repair", "--apply", dir); code != exitIO || !strings.Contains(errs, "not a kdb store") {
		t.Errorf("exit %d: %s", code, errs)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("created %v", ents)
	}
}

// TestRepair_FreeListNameIsADirectory: a directory (or a FIFO) where
// db.free, db.free.prev or db.redo belongs is an error for check (a writable open
// refuses the store), and repair moves it aside as .broken, not copied
// (the copy failed half-way, exit 3); the rebuilt free list takes its
// name.
func TestRepair_FreeListNameIsADirectory(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"db.free", "db.free.prev", "db.redo"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			freeListNameIsADirectory(t, name)
		})
	}
}

func freeListNameIsADirectory(t *testing.T, name string) {
	dir := makeStore(t, 300)
	free := filepath.Join(dir, name)
	if err := os.Remove(free); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Mkdir(free, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runTool(t, "check", dir); code != exitProblems || !strings.Contains(out+errs, name+" is") {
		t.Errorf("check: exit %d, want %d and the directory named\n%s%s", code, exitProblems, out, errs)
	} else if strings.Contains(out+errs, "rebuild-index") || strings.Contains(out+errs, "db.data cannot be read") {
		// db.data is whole: check blamed it and advised a rebuild of the
		// index, where moving the name aside is the whole repair.
		t.Errorf("check: blames db.data or advises --rebuild-index for a directory at %s:\n%s%s", name, out, errs)
	}
	if code, out, errs := runTool(t, "repair", dir); code != exitProblems || !strings.Contains(out, "would: move "+name+" aside") {
		t.Errorf("repair (dry run): exit %d, want %d and the move planned\n%s%s", code, exitProblems, out, errs)
	}
	if st, err := os.Stat(free); err != nil || !st.IsDir() {
		t.Fatalf("the dry run moved %s: %v", name, err)
	}
	code, out, errs := runTool(t, "repair", "--apply", dir)
	if code != exitOK || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply: exit %d\n%s%s", code, out, errs)
	}
	if st, err := os.Stat(free); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s after repair: %v", name, err)
	}
	if st, err := os.Stat(free + ".broken"); err != nil || !st.IsDir() {
		t.Fatalf("the directory was not moved aside as %s.broken: %v", name, err)
	}
	if code, _, _ := runTool(t, "check", dir); code != exitOK {
		t.Fatalf("check after repair: exit %d", code)
	}
}

// TestRepair_JSONListsNeverNull: the JSON's lists are [] when empty, as
// the README documents them (saved was null on a store with nothing to
// repair).
func TestRepair_JSONListsNeverNull(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	code, out, errs := runTool(t, "repair", "--json", dir)
	if code != exitOK {
		t.Fatalf("repair --json: exit %d\n%s%s", code, out, errs)
	}
	for _, field := range []string{`"problems"`, `"actions"`, `"unfixable"`, `"saved"`} {
		if strings.Contains(out, field+": null") {
			t.Errorf("%s is null:\n%s", field, out)
		}
	}
}
