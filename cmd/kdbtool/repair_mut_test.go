package main

// Tests added by mutation testing of kdbtool repair: each guards a
// planned action that a deliberate breakage of repair.go dropped without
// any other test failing.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// interruptedCheckpoint makes a store whose last checkpoint stopped after
// db.redo was written and synced and before db.data was written: the
// db.redo an Open would apply.
func interruptedCheckpoint(t *testing.T) string {
	t.Helper()
	dir := makeStore(t, 200)
	var armed, redoSynced atomic.Bool
	fsys := vfs.Intercept(vfs.OS, func(e vfs.Event) error {
		if !armed.Load() {
			return nil
		}
		switch base := filepath.Base(e.Path); {
		case e.Op == vfs.OpSync && base == "db.redo":
			redoSynced.Store(true)
		case e.Op == vfs.OpWrite && base == "db.data" && redoSynced.Load():
			return errors.New("injected: the checkpoint stops here")
		}
		return nil
	})
	db, err := kdb.Open(dir, &kdb.Options{FS: fsys, SegmentSize: testSegmentSize, CheckpointInterval: -1, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if err := db.Put("users", fmt.Appendf(nil, "user-%05d", i), []byte("changed")); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	if err := db.Checkpoint(); err == nil {
		t.Fatal("the checkpoint did not fail")
	}
	_ = db.Close()
	if !redoSynced.Load() {
		t.Fatal("the checkpoint wrote no db.redo")
	}
	return dir
}

// TestMut_RepairPlansTheRedo guards repair's apply_redo action
// (repair.go, "if in.Redo.WouldApply"): a store whose db.redo Open would
// apply is repaired by applying it, and the dry run says so (exit 1).
func TestMut_RepairPlansTheRedo(t *testing.T) {
	t.Parallel()
	dir := interruptedCheckpoint(t)
	code, m := runJSON(t, "inspect", "--json", dir)
	if jget(t, m, "redo.would_apply") != true {
		t.Fatalf("inspect: exit %d, redo %v; the test needs a db.redo Open would apply", code, m["redo"])
	}
	code, m = runJSON(t, "repair", "--json", dir)
	found := false
	for _, a := range m["actions"].([]any) {
		am := a.(map[string]any)
		found = found || am["action"] == actApplyRedo && strings.Contains(am["detail"].(string), "page images")
	}
	if code != exitProblems || !found || m["ok"] != false {
		t.Fatalf("repair dry run: exit %d, %v; want exit 1 and an %s action", code, m, actApplyRedo)
	}
	code, m = runJSON(t, "repair", "--json", "--apply", dir)
	if code != exitOK || jget(t, m, "after.ok") != true {
		t.Fatalf("repair --apply: exit %d, %v", code, m)
	}
	if code, m = runJSON(t, "inspect", "--json", dir); code != exitOK || jget(t, m, "redo.would_apply") != false {
		t.Fatalf("inspect after repair: exit %d, redo %v", code, m["redo"])
	}
}
