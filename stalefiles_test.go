package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
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

// A journal segment copied in from another store (same number, its own
// header and seed, so every record verifies) was replayed as this store's:
// the store opened holding half of its acknowledged keys and the other
// store's, with a normal report, and check said ok. Segments now carry the
// store's ID (FORMAT.md §4.2): such a segment is ErrCorrupt naming it.
func TestOpen_SegmentOfAnotherStoreRefused(t *testing.T) {
	fs := vfs.NewMem()
	o := &kdb.Options{FS: fs, CheckpointInterval: -1, SegmentSize: 1 << 20}
	fill := func(dir, prefix string) {
		db, err := kdb.Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3000 {
			if err := db.Put("t", fmt.Appendf(nil, "%s%06d", prefix, i), bytes.Repeat([]byte("v"), 900)); err != nil {
				t.Fatal(err)
			}
		}
		// No checkpoint: everything is in the journal, to be replayed.
		if err := kdbtest.CopyFile(fs, dir+"/db-2.log", dir+".seg2"); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	o.NoCheckpointOnClose = true
	fill("/a", "a")
	fill("/b", "b")
	if err := fs.Remove("/a/db-2.log"); err != nil {
		t.Fatal(err)
	}
	if err := kdbtest.CopyFile(fs, "/b.seg2", "/a/db-2.log"); err != nil {
		t.Fatal(err)
	}
	o.NoCheckpointOnClose = false
	for _, ro := range []bool{false, true} {
		oo := *o
		oo.ReadOnly = ro
		db, err := kdb.Open("/a", &oo)
		if err == nil {
			db.Close()
		}
		if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "db-2.log") || !strings.Contains(err.Error(), "another store") {
			t.Fatalf("ReadOnly %v: Open with another store's segment: %v, want ErrCorrupt naming db-2.log", ro, err)
		}
	}
}

// The newest meta slot damaged and db.redo gone (two faults): the older
// meta's index root page was written by the lost checkpoint, so db.data
// holds a tree that meta does not describe. The read-only open said so
// (ErrCorrupt, "meta slot ... lost"); a writable open went on, took the
// newer tree's pages for free ones (set aside by the proof, then leaked)
// and could allocate past the older meta's page count over live pages.
// Now it says so too, and changes nothing.
func TestOpen_LostNewestMetaWithoutRedoRefused(t *testing.T) {
	fs := vfs.NewMem()
	o := &kdb.Options{FS: fs, CheckpointInterval: -1}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		for i := range 500 {
			if err := db.Put("t", fmt.Appendf(nil, "k%d-%04d", r, i), bytes.Repeat([]byte("v"), 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := pagefile.Inspect(fs, "/db")
	if err != nil {
		t.Fatal(err)
	}
	newest := 0
	if in.Slots[1].Meta.Seq > in.Slots[0].Meta.Seq {
		newest = 1
	}
	ps := int64(in.PageSize)
	if err := kdbtest.FlipBit(fs, "/db/db.data", int64(1+in.Slots[newest].Meta.Seq%2)*ps+20, 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove("/db/db.redo"); err != nil {
		t.Fatal(err)
	}
	before, err := readMemFile(fs, "/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		oo := *o
		oo.ReadOnly = ro
		db, err := kdb.Open("/db", &oo)
		if err == nil {
			db.Close()
		}
		if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "lost") {
			t.Errorf("ReadOnly %v: Open: %v, want ErrCorrupt naming the lost meta slot", ro, err)
		}
	}
	if after, _ := readMemFile(fs, "/db/db.data"); !bytes.Equal(before, after) {
		t.Error("the refused opens changed db.data")
	}
}

func readMemFile(fs *vfs.MemFS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err = f.ReadAt(b, 0)
	return b, err
}
