package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
)

// forgetFreePages rewrites dir's db.free (FORMAT.md §2.5) keeping its
// store ID, checkpoint ID and page count, so that Open trusts it, but
// listing no free page: every free page is then leaked (intact, in no tree
// and in no list).
func forgetFreePages(t *testing.T, dir string) {
	t.Helper()
	name := filepath.Join(dir, "db.free")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if le.Uint64(b[56:]) == 0 {
		t.Fatal("db.free lists no free page: nothing to forget")
	}
	out := make([]byte, 72)
	copy(out[8:56], b[8:56])
	le.PutUint64(out[0:], checksum.Sum64(out[8:]))
	if err := os.WriteFile(name, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRepair_LeakedPagesOnly: a store whose only problem is leaked pages
// (nothing of the index lost) is repaired by a free-list rebuild. repair
// called it "the index or store is damaged" and, with a journal no longer
// beginning at db-1.log, told the operator to restore from a backup, while
// recover --force-scan fixed it.
func TestRepair_LeakedPagesOnly(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 6000)
	forgetFreePages(t, dir)
	code, m := runJSON(t, "check", "--json", dir)
	if code != exitProblems || !hasProblem(problemsOf(t, m, "problems"), "error index", "leaked") {
		t.Fatalf("check: exit %d, problems %v; want 1 and leaked pages", code, problemsOf(t, m, "problems"))
	}
	code, m = runJSON(t, "repair", "--json", dir)
	acts, _ := m["actions"].([]any)
	if code != exitProblems || len(acts) == 0 || acts[0].(map[string]any)["action"] != actRebuildFreeList || len(m["unfixable"].([]any)) != 0 {
		t.Fatalf("repair plan: exit %d, actions %v, unfixable %v; want a free-list rebuild", code, m["actions"], m["unfixable"])
	}
	if code, m = runJSON(t, "repair", "--json", "--apply", dir); code != exitOK {
		t.Fatalf("repair --apply: exit %d: %v", code, m)
	}
	if code, out, _ := runTool(t, "check", dir); code != exitOK {
		t.Fatalf("check after the repair: exit %d\n%s", code, out)
	}
}

// A file named like a journal segment but not in the journal's form
// (db-042.log, db-0.log: a segment renamed by hand) is ignored by the
// store; inspect and check now say so, as a warning.
func TestInspect_StraySegmentNamesWarned(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	for _, n := range []string{"db-042.log", "db-0.log"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range []string{"inspect", "check"} {
		code, m := runJSON(t, cmd, "--json", dir)
		ps := problemsOf(t, m, "problems")
		if code != exitOK || !hasProblem(ps, "warning journal", "db-042.log looks like a journal segment") || !hasProblem(ps, "warning journal", "db-0.log") {
			t.Errorf("%s: exit %d, problems %v; want 0 and a warning for each stray name", cmd, code, ps)
		}
	}
}
