package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestRepair_RemovesBrokenTmpLeftovers: the partial db.data.broken.tmp a
// repair --apply SIGKILLed while saving db.data leaves was never cleaned
// up nor reported: the next repair --apply (once recover had fixed the
// store) said "nothing to repair" and left it, and inspect and check did
// not mention it (an outside tester's script), while the README said the
// next repair overwrites it. Now inspect reports each such leftover (any
// <f>.broken.tmp or <f>.broken.N.tmp a repair may leave) as a warning
// with its size and the advice, in text and --json (leftovers[]), and so
// does check; a repair dry run lists it ("would remove", exit 1) and
// removes nothing; repair --apply removes them under the store's lock
// (on a live store: ErrLocked, exit 3, nothing removed) and says so,
// keeping every other file: a whole .broken copy, and names of the form
// that repair never writes.
func TestRepair_RemovesBrokenTmpLeftovers(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	staleFree(t, dir)
	// Killed while it copies db.data (the file it left shows it paused there).
	signalWhenPaused(t, []string{"repair", "--apply", dir}, "KDBTOOL_TEST_PAUSE_SAVE=1", pausedSaving, os.Kill)
	partial, err := os.Stat(filepath.Join(dir, "db.data.broken.tmp"))
	if err != nil {
		t.Fatalf("the killed repair left no db.data.broken.tmp: %v", err)
	}
	// The store fixed by other means, as the tester did: the leftover is
	// all that is left to do.
	if code, _, errs := runTool(t, "recover", dir); code != exitOK {
		t.Fatalf("recover: exit %d: %s", code, errs)
	}
	plant := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plant("db.free.broken.2.tmp", "12345")      // a repair's leftover when db.free.broken and .broken.1 existed
	plant("db.data.broken", "a whole copy")     // a saved copy: kept
	plant("notes.broken.tmp", "not a repair's") // not a name repair writes: kept
	want := []leftoverOut{{"db.data.broken.tmp", partial.Size()}, {"db.free.broken.2.tmp", 5}}

	code, m := runJSON(t, "inspect", "--json", dir)
	if code != exitOK {
		t.Errorf("inspect --json with leftovers: exit %d, want 0 (warnings)", code)
	}
	var got []leftoverOut
	for _, l := range jget(t, m, "leftovers").([]any) {
		lm := l.(map[string]any)
		got = append(got, leftoverOut{lm["name"].(string), int64(lm["size"].(float64))})
	}
	if !slices.Equal(got, want) {
		t.Errorf("inspect --json leftovers %v, want %v", got, want)
	}
	warned := 0
	for _, p := range m["problems"].([]any) {
		pm := p.(map[string]any)
		if pm["area"] == "leftover" && pm["severity"] == "warning" && strings.Contains(pm["message"].(string), "kdbtool repair --apply removes it") {
			warned++
		}
	}
	if warned != len(want) {
		t.Errorf("inspect --json: %d leftover warnings advising repair --apply, want %d: %v", warned, len(want), m["problems"])
	}
	for _, c := range []string{"inspect", "check"} {
		code, out, errs := runTool(t, c, dir)
		for _, l := range want {
			line := fmt.Sprintf("warning: leftover: %s (%d bytes)", filepath.Join(dir, l.Name), l.Size)
			if code != exitOK || !strings.Contains(out, line) {
				t.Errorf("%s: exit %d, no line %q:\n%s%s", c, code, line, out, errs)
			}
		}
	}
	list := fmt.Sprintf("db.data.broken.tmp (%d bytes), db.free.broken.2.tmp (5 bytes)", partial.Size())
	code, out, errs := runTool(t, "repair", dir)
	if code != exitProblems || !strings.Contains(out, "would remove: "+list) || !strings.Contains(out, "dry run: rerun with --apply") {
		t.Errorf("repair (dry run) with leftovers: exit %d, want 1 and \"would remove: %s\":\n%s%s", code, list, out, errs)
	}
	// Under the store's lock only: a live store's are not touched.
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs = runTool(t, "repair", "--apply", dir)
	if cerr := db.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if code != exitIO || !strings.Contains(errs, kdb.ErrLocked.Error()) {
		t.Errorf("repair --apply on a live store: exit %d, stderr %q; want exit 3, ErrLocked", code, errs)
	}
	for _, l := range want {
		if _, err := os.Stat(filepath.Join(dir, l.Name)); err != nil {
			t.Errorf("repair --apply on a live store removed %s: %v", l.Name, err)
		}
	}

	code, out, errs = runTool(t, "repair", "--apply", dir)
	if code != exitOK || !strings.Contains(out, "removed: "+list) || !strings.Contains(out, "nothing else to repair") {
		t.Errorf("repair --apply with leftovers: exit %d, want 0 and \"removed: %s\":\n%s%s", code, list, out, errs)
	}
	names := dirNames(t, dir)
	for _, l := range want {
		if slices.Contains(names, l.Name) {
			t.Errorf("repair --apply left %s", l.Name)
		}
	}
	for _, keep := range []string{"db.data.broken", "notes.broken.tmp"} {
		if !slices.Contains(names, keep) {
			t.Errorf("repair --apply removed %s, which is no leftover of a repair", keep)
		}
	}
	code, m = runJSON(t, "inspect", "--json", dir)
	if l := jget(t, m, "leftovers").([]any); code != exitOK || len(l) != 0 || len(m["problems"].([]any)) != 0 {
		t.Errorf("inspect after repair --apply: exit %d, leftovers %v, problems %v", code, l, m["problems"])
	}
	// --json says what it removed.
	plant("db.redo.broken.tmp", "xy")
	code, m = runJSON(t, "repair", "--json", "--apply", dir)
	if l, _ := m["leftovers"].([]any); code != exitOK || len(l) != 1 || l[0].(map[string]any)["name"] != "db.redo.broken.tmp" {
		t.Errorf("repair --json --apply: exit %d, leftovers %v; want db.redo.broken.tmp", code, m["leftovers"])
	}
}

// TestIsBrokenTmp: the names a repair's save writes its copy to, and
// only those, are leftovers.
func TestIsBrokenTmp(t *testing.T) {
	for _, n := range []string{"db.data.broken.tmp", "db.redo.broken.tmp", "db.free.broken.tmp", "db.free.prev.broken.tmp",
		"db-7.log.broken.tmp", "db.data.broken.1.tmp", "db-12.log.broken.30.tmp"} {
		if !isBrokenTmp(n) {
			t.Errorf("isBrokenTmp(%q) = false", n)
		}
	}
	for _, n := range []string{"db.data.broken", "db.data.tmp", "db.free.tmp", "db.data.broken.0.tmp", "db.data.broken.01.tmp",
		"db.data.broken.x.tmp", "lock.broken.tmp", "notes.broken.tmp", "db-0.log.broken.tmp", ".broken.tmp", "db.data.broken.1"} {
		if isBrokenTmp(n) {
			t.Errorf("isBrokenTmp(%q) = true", n)
		}
	}
}

// A symbolic link planted at the name repair copies db.data to before its
// rename (db.data.broken.tmp) does not get the copy written where it
// points, outside the store: the repair refuses it (and removes the
// link), the file it pointed to is untouched, and a second repair works.
func TestRepair_BrokenTmpSymlinkNotFollowed(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	staleFree(t, dir)
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("not the store's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "db.data.broken.tmp")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runTool(t, "repair", "--apply", dir)
	if b, err := os.ReadFile(outside); err != nil || string(b) != "not the store's" {
		t.Fatalf("repair --apply (exit %d) wrote through the link: %s now holds %d bytes (%v)\n%s%s", code, outside, len(b), err, out, errs)
	}
	if code == exitOK {
		t.Fatalf("repair --apply over a planted link: exit 0\n%s%s", out, errs)
	}
	if code, out, errs := runTool(t, "repair", "--apply", dir); code != exitOK {
		t.Fatalf("the second repair --apply: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runTool(t, "check", dir); code != exitOK {
		t.Fatalf("check after the repair: exit %d\n%s%s", code, out, errs)
	}
}
