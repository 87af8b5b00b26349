package kdb_test

// Tests for breakages of recovery/recover.go and pagefile/open.go that the
// default suite did not catch (an outside mutation hunt, 2026-12-08).

import (
	"bytes"
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

// A store whose db.data was never checkpointed (what kdbtool repair
// --rebuild-index leaves: an empty db.data beside the whole journal)
// needs its journal from db-1.log: without it the open must fail, not
// rebuild the store from db-2.log on, silently missing db-1.log's writes.
func TestOpen_EmptyDataFileBesideAJournalNeedsItsFirstSegment(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 4000) // kept in the journal: segments stay referenced
	for i := range 60 {
		if err := db.Put("ix", []byte(fmt.Sprintf("k%03d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "db-2.log")); err != nil {
		t.Fatalf("want several segments: %v", err)
	}
	id, err := journal.SegmentStoreID(vfs.OS, filepath.Join(dir, "db-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"db.data", "db.redo", "db.free", "db.free.prev"} {
		_ = os.Remove(filepath.Join(dir, n))
	}
	pf, _, err := pagefile.Open(dir, pagefile.Options{StoreID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "db-1.log")); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err == nil {
		_, gerr := db.Get("ix", []byte("k000"))
		db.Close()
		t.Fatalf("open of a never-checkpointed store without db-1.log: nil error (Get k000: %v); want kdb.ErrCorrupt", gerr)
	}
	if !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("open: %v, want kdb.ErrCorrupt", err)
	}
}

// A db.redo older than the meta (an earlier copy of it put back beside a
// newer db.data) is ignored: the store opens as it was, every key intact.
func TestOpen_OlderRedoIgnored(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(gen int) {
		for i := range 300 {
			if err := db.Put("ix", []byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("gen%d-%04d", gen, i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	put(1)
	old, err := os.ReadFile(filepath.Join(dir, "db.redo"))
	if err != nil {
		t.Fatal(err)
	}
	put(2)
	put(3)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "db.redo"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatalf("open with an older db.redo: %v", err)
	}
	defer db.Close()
	if r := db.Recovery(); r.RedoApplied {
		t.Errorf("an older db.redo was applied: %+v", r)
	}
	for i := range 300 {
		v, err := db.Get("ix", []byte(fmt.Sprintf("k%04d", i)))
		if want := fmt.Sprintf("gen3-%04d", i); err != nil || string(v) != want {
			t.Fatalf("k%04d: %q, %v; want %q", i, v, err, want)
		}
	}
	if rep, err := db.Check(); err != nil {
		t.Fatalf("check: %v %+v", err, rep)
	}
}
