package kdb_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// An operator puts back an earlier copy of db.data (from before several
// checkpoints) while db.redo, the last checkpoint's double-write, stays.
// db.redo's pages follow a db.data this file is not: Open applied them over
// it and ruined a store whose journal still held every write since the
// copy's checkpoint (reads failed ErrCorrupt, and the store no longer
// opened even without db.redo). Now db.redo is ignored, with the reason in
// the report, and every key comes back from the journal.
func TestOpen_RedoAheadOfAnOlderDataFileIsIgnored(t *testing.T) {
	fs := vfs.NewMem()
	o := &kdb.Options{FS: fs, CheckpointInterval: -1, SegmentSize: 64 << 20}
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	val := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "v%06d", i), 8) }
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	put := func(m int) {
		for ; m > 0; m-- {
			if err := db.Put("t", key(n), val(n)); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	put(2000)
	if err := db.Close(); err != nil { // checkpoints
		t.Fatal(err)
	}
	if err := kdbtest.CopyFile(fs, "/db/db.data", "/old.data"); err != nil {
		t.Fatal(err)
	}
	if db, err = kdb.Open("/db", o); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		put(1500)
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	put(100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := kdbtest.CopyFile(fs, "/old.data", "/db/db.data"); err != nil {
		t.Fatal(err)
	}

	for life := range 2 { // and again, after a checkpoint of the recovered store
		db, err := kdb.Open("/db", o)
		if err != nil {
			t.Fatalf("life %d: Open: %v", life, err)
		}
		if life == 0 {
			if r := db.Recovery().RedoIgnored; !strings.Contains(r, "ahead of meta") {
				t.Errorf("RedoIgnored = %q, want the reason", r)
			}
		}
		for i := range n {
			got, err := db.Get("t", key(i))
			if err != nil || !bytes.Equal(got, val(i)) {
				db.Close()
				t.Fatalf("life %d: key %d: %q, %v", life, i, got, err)
			}
		}
		if _, err := db.Check(); err != nil {
			t.Errorf("life %d: Check: %v", life, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
