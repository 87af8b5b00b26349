package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

func TestInspect_Clean(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	before := snapshotFiles(t, dir)
	code, out, errs := runTool(t, "inspect", dir)
	t.Logf("%s%s", out, errs)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, ok := jget(t, m, "meta.checkpoint_id").(string); !ok {
		t.Errorf("meta.checkpoint_id not a string")
	}
	if v, _ := jget(t, m, "meta.page_count").(float64); v < 4 {
		t.Errorf("meta.page_count = %v", v)
	}
	if v, _ := jget(t, m, "free_list.matches_meta").(bool); !v {
		t.Errorf("free_list.matches_meta = false on a clean store")
	}
	_ = jget(t, m, "free_list.free_pages").(float64)
	requireSameFiles(t, before, snapshotFiles(t, dir))
}

func TestCommands_UsageAndHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"inspect", "check", "recover", "repair"} {
		if code, _, _ := runTool(t, c, "-h"); code != exitOK {
			t.Errorf("%s -h: exit %d", c, code)
		}
		if code, _, _ := runTool(t, c); code != exitUsage {
			t.Errorf("%s without DIR: exit %d", c, code)
		}
		if code, _, _ := runTool(t, c, "--nope", "x"); code != exitUsage {
			t.Errorf("%s --nope: exit %d", c, code)
		}
		if code, _, _ := runTool(t, c, t.TempDir()+"/none"); code != exitIO {
			t.Errorf("%s on a missing dir: exit %d", c, code)
		}
	}
}

func TestInspect_JournalAfterCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := db.Put("a", []byte{byte(i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, dir)
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != 0 || jget(t, m, "journal.records_after_checkpoint") != float64(3) {
		t.Errorf("inspect: exit %d, journal %v", code, m["journal"])
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
	code, m = runJSON(t, "recover", "--json", dir)
	if code != 0 || m["records_replayed"] != float64(3) {
		t.Errorf("recover: exit %d, %v", code, m)
	}
	_, m = runJSON(t, "inspect", "--json", dir)
	if jget(t, m, "journal.records_after_checkpoint") != float64(0) {
		t.Errorf("inspect after recover: journal %v", m["journal"])
	}
}

// TestInspect_JournalCutBeforeTheReplayPosition: a last segment cut short
// below the meta's replay position is an error in inspect and check (the
// store's open refuses it), not a torn-tail warning.
func TestInspect_JournalCutBeforeTheReplayPosition(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	code, m := runJSON(t, "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	seg := uint64(jget(t, m, "meta.replay_segment").(float64))
	off := int64(jget(t, m, "meta.replay_offset").(float64))
	if seg == 0 || off < 1000 {
		t.Fatalf("replay position db-%d.log@%d: want one well inside its segment", seg, off)
	}
	if err := os.Truncate(filepath.Join(dir, fmt.Sprintf("db-%d.log", seg)), off-333); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, dir)
	for _, c := range []string{"inspect", "check"} {
		code, out, errs := runTool(t, c, dir)
		if code != exitProblems || !strings.Contains(out+errs, "error: journal: the journal is cut or damaged at") {
			t.Fatalf("%s: exit %d\n%s%s", c, code, out, errs)
		}
	}
	code, m = runJSON(t, "inspect", "--json", dir)
	if code != exitProblems || jget(t, m, "journal.torn_before_replay") != true {
		t.Fatalf("inspect --json: exit %d, torn_before_replay %v", code, jget(t, m, "journal.torn_before_replay"))
	}
	if code, _, _ := runTool(t, "recover", dir); code != exitProblems {
		t.Fatalf("recover: exit %d, want %d", code, exitProblems)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
}
