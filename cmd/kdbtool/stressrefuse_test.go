package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestStress_RefusalWritesNothing: stress refuses a store holding data it
// did not write (an application's) before it opens it for writing: on a
// store left by a crash, with records after its checkpoint, a writable
// open would replay them and checkpoint at close, rewriting db.data,
// db.free and db.redo of the store it then says it left alone.
func TestStress_RefusalWritesNothing(t *testing.T) {
	t.Parallel()
	live := t.TempDir()
	db, err := kdb.Open(live, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			if err := db.Put("app", []byte(fmt.Sprintf("k%05d", i)), []byte("application data")); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 200)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	put(200, 300) // journaled, synced, not checkpointed
	// The store as a crash now leaves it: every file as it is on disk.
	dir := t.TempDir()
	ents, err := os.ReadDir(live)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && e.Name() != "LOCK" {
			if err := copyFile(filepath.Join(live, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, dir)
	code, out, errs := runTool(t, "stress", "--count", "5", "--index", "other", dir)
	if code != exitUsage || out != "" || !strings.Contains(errs, "holds data stress did not write") {
		t.Errorf("stress on an application's store: exit %d, stdout %q, stderr %q: want exit 2 refusing it", code, out, errs)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
}
