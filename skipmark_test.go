package kdb_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_SkipDamagedAtTheReplayPositionThenPlainOpens: one flipped byte
// in the last batch of a cleanly closed store, the batch its last
// checkpoint's replay position names. Every plain Open verifies from that
// position and fails; an Open with SkipDamagedJournal skipped the batch
// (already in the pages), replayed nothing and took no checkpoint, so the
// position stayed on the damage and every later plain Open failed the same
// way: kdbtool recover --skip-damaged exited 0 and the application still
// could not open the store (an outside tester's report). Now recovery
// writes a journal mark after the damage and checkpoints at it: the next
// plain Open succeeds, with every key, and the damaged segment goes with
// the journal's GC.
func TestOpen_SkipDamagedAtTheReplayPositionThenPlainOpens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }
	for i := 0; i < 100; i++ {
		if err := db.Put("ix", key(i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, journal.SegmentID(in.Meta.ReplaySegment).String())
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(in.Meta.ReplayOffset)); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xa5
	if _, err := f.WriteAt(b[:], int64(in.Meta.ReplayOffset)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if _, err := kdb.Open(dir, nil); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("plain open of the damaged store: %v, want ErrCorrupt", err)
	}
	db, err = kdb.Open(dir, &kdb.Options{SkipDamagedJournal: true})
	if err != nil {
		t.Fatalf("open with SkipDamagedJournal: %v", err)
	}
	if r := db.Recovery(); len(r.Skipped) != 1 {
		t.Errorf("skipped %v, want the damaged batch", r.Skipped)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		db, err = kdb.Open(dir, nil)
		if err != nil {
			t.Fatalf("round %d: plain open after the recovery that skipped the damage: %v", round, err)
		}
		for i := 0; i < 100; i++ {
			if v, err := db.Get("ix", key(i)); err != nil || string(v) != fmt.Sprint("v", i) {
				t.Fatalf("round %d: key %d: %q, %v", round, i, v, err)
			}
		}
		if _, err := db.Check(); err != nil {
			t.Errorf("round %d: check: %v", round, err)
		}
		if err := db.Put("ix", []byte(fmt.Sprint("new", round)), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
