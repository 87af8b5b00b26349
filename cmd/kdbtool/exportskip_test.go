package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestExport_SkipDamagedAfterAMissingMiddleSegment: a journal segment in
// the middle lost (one that held only inline values, all before the
// replay position: db.data holds every write) left a store that no
// kdbtool command made usable: recover --skip-damaged exits 0, but every
// later plain open, check and export fail on the same gap, and repair
// advised recover --skip-damaged again. export --skip-damaged reads it as
// that recover opens it, the import of that file is a store that passes
// check with every key, and repair's advice names that way out.
func TestExport_SkipDamagedAfterAMissingMiddleSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10, Sync: kdb.UnsafeSyncNever})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), 15000)
	for i := range 40 { // journal values that keep db-1.log
		if err := db.Put("t", []byte(fmt.Sprintf("anchor%02d", i)), big); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5000 { // inline values: many segments
		if err := db.Put("t", []byte(fmt.Sprintf("k%07d", i)), []byte(fmt.Sprintf("v%07d-%s", i, bytes.Repeat([]byte("x"), 90)))); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	want := storeContent(t, dir)
	segs, err := filepath.Glob(filepath.Join(dir, "db-*.log"))
	if err != nil || len(segs) < 10 {
		t.Fatalf("segments %v (%v): want at least 10", segs, err)
	}
	// After the anchors' segments, before the last: inline values only.
	name := fmt.Sprintf("db-%d.log", len(segs)-3)
	gap := filepath.Join(dir, name)
	if err := os.Remove(gap); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runTool(t, "recover", "--skip-damaged", dir); code != exitOK {
		t.Fatalf("recover --skip-damaged: exit %d\n%s%s", code, out, errs)
	}
	file := filepath.Join(t.TempDir(), "snap.kdbx")
	if code, _, errs := runTool(t, "export", dir, file); code == exitOK || !strings.Contains(errs, name) {
		t.Fatalf("export without --skip-damaged: exit %d, stderr %q; want it to fail on the missing segment", code, errs)
	}
	code, out, errs := runTool(t, "repair", dir)
	if code != exitProblems || !strings.Contains(out, "kdbtool export --skip-damaged DIR FILE") {
		t.Errorf("repair: exit %d, want 1 and advice naming export --skip-damaged:\n%s%s", code, out, errs)
	}
	code, out, errs = runTool(t, "export", "--skip-damaged", dir, file)
	if code != exitOK || !strings.Contains(errs, "skipped: ") || !strings.Contains(errs, name) {
		t.Fatalf("export --skip-damaged: exit %d, want 0 and a warning naming what was skipped:\n%s%s", code, out, errs)
	}
	dst := filepath.Join(t.TempDir(), "new")
	if code, _, errs := runTool(t, "import", file, dst); code != exitOK {
		t.Fatalf("import: exit %d: %s", code, errs)
	}
	if code, out, errs := runTool(t, "check", dst); code != exitOK {
		t.Errorf("check of the imported store: exit %d\n%s%s", code, out, errs)
	}
	if storeContent(t, dst) != want {
		t.Errorf("the imported store differs from the store before the segment was lost")
	}
}
