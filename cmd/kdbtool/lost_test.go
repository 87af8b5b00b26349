package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRepair_MissingDataFile: a store that lost db.data is exit 1
// (corrupt) for every tool, never a new empty store; check and repair say
// that the index can be rebuilt from a journal that still begins at
// db-1.log, and repair --apply --rebuild-index does it, under the lock,
// with every write back.
func TestCheckRepair_MissingDataFile(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 3000)
	want := storeContent(t, dir)
	if err := os.Remove(filepath.Join(dir, "db.data")); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, dir)

	for _, cmd := range [][]string{{"inspect"}, {"check"}, {"recover"}, {"dump", "--index", "users"}, {"export"}} {
		args := append(append([]string{}, cmd...), dir)
		if cmd[0] == "export" {
			args = []string{"export", dir, filepath.Join(t.TempDir(), "x.kdbx")}
		}
		code, out, errs := runTool(t, args...)
		if code != exitProblems || !strings.Contains(out+errs, "db.data is missing") {
			t.Errorf("%v: exit %d, want 1 naming db.data:\n%s%s", cmd, code, out, errs)
		}
	}
	code, m := runJSON(t, "check", "--json", dir)
	requireFindings(t, "check", m["problems"], []finding{{"error", "pagefile", "repair --apply --rebuild-index can rebuild it"}})
	if code != exitProblems {
		t.Errorf("check: exit %d", code)
	}
	code, m = runJSON(t, "recover", "--json", dir)
	if code != exitProblems || m["corrupt"] != true {
		t.Errorf("recover: exit %d, %v", code, m)
	}
	code, m = runJSON(t, "repair", "--json", dir)
	if code != exitProblems || !strings.Contains(jsonString(m["unfixable"]), "rerun with --rebuild-index") {
		t.Errorf("repair dry run: exit %d, %v", code, m)
	}
	code, _, _ = runTool(t, "repair", "--apply", dir)
	if code != exitProblems {
		t.Errorf("repair --apply without --rebuild-index: exit %d", code)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))

	code, m = runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
	if code != 0 || jget(t, m, "after.ok") != true {
		t.Fatalf("repair --apply --rebuild-index: exit %d, %v", code, m)
	}
	if got := storeContent(t, dir); got != want {
		t.Errorf("the rebuilt store differs from the one that lost db.data")
	}
	if code, _, errs := runTool(t, "check", dir); code != 0 {
		t.Errorf("check after the rebuild: exit %d: %s", code, errs)
	}
}

// TestCheckRepair_MissingDataFileJournalCollected: when the journal no
// longer begins at db-1.log, repair refuses the rebuild and says why, and
// changes nothing.
func TestCheckRepair_MissingDataFileJournalCollected(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 3000)
	for _, n := range []string{"db.data", "db-1.log"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshotFiles(t, dir)
	code, m := runJSON(t, "check", "--json", dir)
	requireFindings(t, "check", m["problems"], []finding{{"error", "pagefile", "the journal starts at db-2.log, not db-1.log"}})
	if code != exitProblems {
		t.Errorf("check: exit %d", code)
	}
	code, m = runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
	if code != exitProblems || !strings.Contains(jsonString(m["unfixable"]), "restore db.data from a backup") {
		t.Errorf("repair --apply --rebuild-index: exit %d, %v", code, m)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
}

func jsonString(v any) string {
	var b strings.Builder
	if l, ok := v.([]any); ok {
		for _, e := range l {
			s, _ := e.(string)
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// TestCheckRecover_MissingSegment: a missing journal segment, first,
// middle or last, makes check exit 1 (not 3) naming it, and recover exit 1;
// recover --skip-damaged opens the store, lists the segment as skipped and
// exits 0, and the loss stays visible: check and recover still exit 1.
func TestCheckRecover_MissingSegment(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"first", "middle", "last"} {
		t.Run(which, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 6000)
			segs := segments(t, dir)
			if len(segs) < 3 || segs[0].ID != 1 {
				t.Fatalf("segments %v: want db-1.log and two more", segs)
			}
			gone := map[string]string{"first": segs[0].ID.String(), "middle": segs[1].ID.String(),
				"last": segs[len(segs)-1].ID.String()}[which]
			if err := os.Remove(filepath.Join(dir, gone)); err != nil {
				t.Fatal(err)
			}
			code, m := runJSON(t, "check", "--json", dir)
			if code != exitProblems || !strings.Contains(fmt.Sprint(m["problems"]), gone+"@0: segment "+gone+" is missing") {
				t.Errorf("check: exit %d, %v", code, m["problems"])
			}
			code, _, errs := runTool(t, "recover", dir)
			if code != exitProblems || !strings.Contains(errs, gone) {
				t.Errorf("recover: exit %d: %s", code, errs)
			}
			code, m = runJSON(t, "recover", "--json", "--skip-damaged", dir)
			if code != 0 || !strings.Contains(jsonString(m["skipped"]), "segment "+gone+" is missing") {
				t.Errorf("recover --skip-damaged: exit %d, %v", code, m)
			}
			if code, _, _ := runTool(t, "check", dir); code != exitProblems {
				t.Errorf("check after recover --skip-damaged: exit %d, want 1", code)
			}
			if code, _, _ := runTool(t, "recover", dir); code != exitProblems {
				t.Errorf("recover after recover --skip-damaged: exit %d, want 1", code)
			}
			if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
				t.Errorf("%s was created again", gone)
			}
		})
	}
}
