package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepair_ApplyRefusedWhileSomethingIsUnfixable: a plan that holds a
// repair (a stale db.free: rebuild it) beside damage it cannot repair (a
// record before the replay position) is refused as a whole by --apply:
// exit 1, the unfixable damage named, nothing carried out, no file
// changed. A repair that went ahead would have saved and rewritten files
// of a store whose damage it leaves, and said it repaired it.
func TestRepair_ApplyRefusedWhileSomethingIsUnfixable(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 6000)
	staleFree(t, dir)
	flipBeforeReplayPosition(t, dir)
	before := snapshotFiles(t, dir)

	code, m := runJSON(t, "repair", "--json", dir)
	acts, _ := m["actions"].([]any)
	if code != exitProblems || len(acts) == 0 || jsonString(m["unfixable"]) == "" {
		t.Fatalf("repair dry run: exit %d, actions %v, unfixable %v: want a free-list rebuild beside unfixable damage (the setup no longer makes both)", code, acts, m["unfixable"])
	}
	for _, args := range [][]string{
		{"repair", "--json", "--apply", dir},
		{"repair", "--json", "--apply", "--rebuild-index", dir},
	} {
		code, m = runJSON(t, args...)
		if code != exitProblems || m["ok"] != false || !strings.Contains(jsonString(m["unfixable"]), "before the replay position") {
			t.Errorf("%v: exit %d, ok %v, unfixable %v: want exit 1 naming the damage", args, code, m["ok"], m["unfixable"])
		}
		if saved, _ := m["saved"].([]any); len(saved) != 0 {
			t.Errorf("%v: saved %v: want nothing carried out", args, saved)
		}
		requireSameFiles(t, before, snapshotFiles(t, dir))
	}
}

// TestRepair_SavedCopiesNeverOverwritten: each repair that saves a file
// keeps the copies earlier repairs saved: the second is db.data.broken.1,
// and db.data.broken still holds the first copy's bytes.
func TestRepair_SavedCopiesNeverOverwritten(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 3000)
	first := []byte("an earlier repair's copy of db.data")
	if err := os.WriteFile(filepath.Join(dir, "db.data.broken"), first, 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "db.data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "db.free")); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "repair", "--json", "--apply", dir)
	if code != exitOK {
		t.Fatalf("repair --apply: exit %d: %v", code, m)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "db.data.broken")); err != nil || string(got) != string(first) {
		t.Errorf("db.data.broken after a second repair: %d bytes, %v: want the earlier copy kept (%d bytes)", len(got), err, len(first))
	}
	got, err := os.ReadFile(filepath.Join(dir, "db.data.broken.1"))
	if err != nil {
		t.Fatalf("the second copy: %v (saved %v)", err, m["saved"])
	}
	if string(got) != string(data) {
		t.Errorf("db.data.broken.1 holds %d bytes, not the %d of db.data before the repair", len(got), len(data))
	}
	if s := jsonString(m["saved"]); !strings.Contains(s, "db.data.broken.1") {
		t.Errorf("saved %q: want db.data.broken.1 named", s)
	}
}
