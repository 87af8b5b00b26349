package kdb_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

func segOpts(fs vfs.FS) *kdb.Options {
	return &kdb.Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1}
}

// segStore writes n keys with values of size bytes (above the value
// threshold they stay in the journal, and the index refers to their
// segments) and closes (a checkpoint, then journal GC). With after > 0 it
// reopens and writes after more keys and closes without a checkpoint, so
// that segments after the replay position hold only records to replay.
func segStore(t *testing.T, n, size, after int) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewMem()
	put := func(o *kdb.Options, prefix string, n int) {
		db, err := kdb.Open("/db", o)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := db.Put("ix", []byte(fmt.Sprintf("%s%05d", prefix, i)), make([]byte, size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	put(segOpts(mem), "k", n)
	if after > 0 {
		o := segOpts(mem)
		o.NoCheckpointOnClose = true
		put(o, "a", after)
	}
	return mem
}

func segIDs(t *testing.T, mem *vfs.MemFS) []journal.SegmentID {
	t.Helper()
	var ids []journal.SegmentID
	for _, n := range memNames(t, mem) {
		if id, ok := journal.ParseSegmentName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// requireMissing requires Open to fail with ErrCorrupt naming seg, for a
// writable and a read-only open, and to leave the directory as it was.
func requireMissing(t *testing.T, mem *vfs.MemFS, seg journal.SegmentID) {
	t.Helper()
	before := memNames(t, mem)
	for _, ro := range []bool{false, true} {
		o := segOpts(mem)
		o.ReadOnly = ro
		db, err := kdb.Open("/db", o)
		if err == nil {
			db.Close()
			t.Fatalf("read-only %v: Open succeeded without %s", ro, seg)
		}
		if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), seg.String()+"@0: segment") {
			t.Errorf("read-only %v: %v, want ErrCorrupt naming %s", ro, err, seg)
		}
	}
	if after := memNames(t, mem); !slices.Equal(before, after) {
		t.Errorf("a failed Open changed the directory: %v -> %v", before, after)
	}
}

// TestOpen_MissingSegmentIsCorrupt: a journal segment the store needs that
// is missing, first, middle or last, is ErrCorrupt naming it. The store
// knows it needs a segment from its replay position (its segment must
// exist, and every segment up to it since the first the index refers to),
// from the values the index keeps in the journal (segment refs), and from
// the segment numbering (no gap).
func TestOpen_MissingSegmentIsCorrupt(t *testing.T) {
	t.Parallel()
	t.Run("first, holding values the index refers to", func(t *testing.T) {
		t.Parallel()
		mem := segStore(t, 200, 1000, 0)
		ids := segIDs(t, mem)
		if len(ids) < 3 || ids[0] != 1 {
			t.Fatalf("segments %v: want db-1.log and two more", ids)
		}
		mem.Remove("/db/" + ids[0].String())
		requireMissing(t, mem, ids[0])
	})
	t.Run("first, holding the replay position", func(t *testing.T) {
		t.Parallel()
		mem := segStore(t, 2000, 100, 2000)
		ids := segIDs(t, mem)
		if len(ids) < 2 || ids[0] == 1 {
			t.Fatalf("segments %v: want GC to have removed db-1.log, and two segments or more", ids)
		}
		mem.Remove("/db/" + ids[0].String())
		requireMissing(t, mem, ids[0])
	})
	t.Run("middle", func(t *testing.T) {
		t.Parallel()
		mem := segStore(t, 200, 1000, 0)
		ids := segIDs(t, mem)
		mem.Remove("/db/" + ids[1].String())
		requireMissing(t, mem, ids[1])
	})
	t.Run("last, holding the replay position", func(t *testing.T) {
		t.Parallel()
		mem := segStore(t, 200, 1000, 0)
		ids := segIDs(t, mem)
		mem.Remove("/db/" + ids[len(ids)-1].String())
		requireMissing(t, mem, ids[len(ids)-1])
	})
	t.Run("every segment", func(t *testing.T) {
		t.Parallel()
		mem := segStore(t, 200, 100, 0)
		ids := segIDs(t, mem)
		for _, id := range ids {
			mem.Remove("/db/" + id.String())
		}
		requireMissing(t, mem, ids[0])
	})
}

// TestOpen_CollectedSegmentsAreNotMissing: segments journal GC removed
// (before the replay position, holding no value the index refers to) are
// not missing.
func TestOpen_CollectedSegmentsAreNotMissing(t *testing.T) {
	t.Parallel()
	mem := segStore(t, 2000, 100, 0)
	if ids := segIDs(t, mem); ids[0] == 1 {
		t.Fatalf("segments %v: GC removed nothing", ids)
	}
	db, err := kdb.Open("/db", segOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Check(); err != nil {
		t.Error(err)
	}
	db.Close()
}

// TestOpen_SkipDamagedMissingSegment: with SkipDamagedJournal a store with
// a missing segment opens, lists the segment as skipped, never reuses its
// id, and a read of a value the index keeps in it is ErrCorrupt, never
// another record's bytes. The loss stays visible: the next Open without
// SkipDamagedJournal fails again.
func TestOpen_SkipDamagedMissingSegment(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"first", "middle", "last"} {
		t.Run(which, func(t *testing.T) {
			t.Parallel()
			mem := segStore(t, 200, 1000, 0)
			ids := segIDs(t, mem)
			gone := map[string]journal.SegmentID{"first": ids[0], "middle": ids[1], "last": ids[len(ids)-1]}[which]
			mem.Remove("/db/" + gone.String())
			o := segOpts(mem)
			o.SkipDamagedJournal = true
			db, err := kdb.Open("/db", o)
			if err != nil {
				t.Fatalf("open with SkipDamagedJournal: %v", err)
			}
			r := db.Recovery()
			if len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0], "segment "+gone.String()+" is missing") ||
				!strings.Contains(r.Skipped[0], "; the index refers to ") {
				t.Errorf("skipped %v, want %s and the values lost", r.Skipped, gone)
			}
			// Some keys' values were in the missing segment: ErrCorrupt.
			lost, kept := 0, 0
			for i := 0; i < 200; i++ {
				v, err := db.Get("ix", []byte(fmt.Sprintf("k%05d", i)))
				switch {
				case errors.Is(err, kdb.ErrCorrupt):
					lost++
				case err == nil && len(v) == 1000:
					kept++
				default:
					t.Fatalf("get k%05d: %d bytes, %v", i, len(v), err)
				}
			}
			if lost == 0 || kept == 0 {
				t.Errorf("%d values lost, %d kept: want some of each", lost, kept)
			}
			// New writes go to a segment numbered after every id the
			// store knew.
			if err := db.Put("ix", []byte("new"), make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			now := segIDs(t, mem)
			if slices.Contains(now, gone) {
				t.Errorf("the id of the missing %s was reused: %v", gone, now)
			}
			if which == "last" && now[len(now)-1] != gone+1 {
				t.Errorf("segments %v: the new one should be %s", now, gone+1)
			}
			requireMissing(t, mem, gone)
		})
	}
}

// TestOpen_SkipDamagedForgetsUnreferencedSegment: a missing segment that
// held the replay position but no value the index refers to is forgotten
// once an open with SkipDamagedJournal has replayed what follows it and
// checkpointed: the next plain Open succeeds.
func TestOpen_SkipDamagedForgetsUnreferencedSegment(t *testing.T) {
	t.Parallel()
	mem := segStore(t, 2000, 100, 2000)
	ids := segIDs(t, mem)
	mem.Remove("/db/" + ids[0].String())
	o := segOpts(mem)
	o.SkipDamagedJournal = true
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	if r := db.Recovery(); len(r.Skipped) != 1 || r.RecordsReplayed == 0 {
		t.Errorf("skipped %v, %d records replayed", r.Skipped, r.RecordsReplayed)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open("/db", segOpts(mem))
	if err != nil {
		t.Fatalf("plain open after the loss was accepted: %v", err)
	}
	if _, err := db.Check(); err != nil {
		t.Error(err)
	}
	db.Close()
}

// A store killed before its first timed checkpoint, whose db-1.log was
// then lost, is refused naming it (an outside tester's MQTT broker store
// opened empty: every acknowledged message, session and retained message
// gone, `kdbtool check` ok). Open takes a new store's first checkpoint
// itself, so the meta names the journal before anything is acknowledged.
// Small and large values, and a store whose only segment held nothing.
func TestOpen_NeverCheckpointedStoreMissingItsFirstSegment(t *testing.T) {
	for _, size := range []int{0, 10, 2000} {
		t.Run(fmt.Sprintf("value=%d", size), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			o := segOpts(mem)
			db, err := kdb.Open("/db", o)
			if err != nil {
				t.Fatal(err)
			}
			if size > 0 {
				for i := range 20 {
					if err := db.Put("ix", []byte(fmt.Sprintf("k%03d", i)), make([]byte, size)); err != nil {
						t.Fatal(err)
					}
				}
			}
			img := mem.CrashClone(vfs.CrashOptions{}) // a power loss, no checkpoint since Open's
			db.Close()
			if err := img.Remove("/db/db-1.log"); err != nil {
				t.Fatal(err)
			}
			o.FS = img
			db, err = kdb.Open("/db", o)
			if err == nil {
				_, gerr := db.Get("ix", []byte("k000"))
				db.Close()
				t.Fatalf("Open of a store that lost db-1.log succeeded (Get k000: %v)", gerr)
			}
			if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "db-1.log is missing") {
				t.Fatalf("Open: %v, want ErrCorrupt naming db-1.log", err)
			}
			// kdbtool check and inspect open read-only.
			if _, err := kdb.Open("/db", &kdb.Options{FS: img, ReadOnly: true}); !errors.Is(err, kdb.ErrCorrupt) {
				t.Fatalf("read-only Open: %v, want ErrCorrupt", err)
			}
		})
	}
}

// Another store's db.data put in place of this store's is named as the
// odd one out: every journal segment agrees on the store the files came
// from, so the error names db.data (it blamed db-1.log, "of another
// store"), and SkipDamagedJournal refuses rather than drop the whole
// journal as damage and serve the foreign index (kdbtool repair advised
// recover --skip-damaged, which did: an outside tester lost 10 of 50 keys,
// exit 0). One segment copied in from another store is still that
// segment's error.
func TestOpen_AnotherStoresDataFileNamed(t *testing.T) {
	build := func() *vfs.MemFS {
		mem := segStore(t, 60, 2000, 20) // several segments, records after the replay position
		if ids := segIDs(t, mem); len(ids) < 2 {
			t.Fatalf("segments %v, want two at least", ids)
		}
		return mem
	}
	mine, theirs := build(), build()
	copyFile := func(from, to *vfs.MemFS, name string) {
		b, err := vfs.ReadFile(from, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(to, name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	swapped := mine.Clone()
	copyFile(theirs, swapped, "/db/db.data")
	ids := segIDs(t, swapped)
	last := ids[len(ids)-1]
	// A segment whose header does not read (zeroed, or an empty file after
	// the last) decides nothing: it must not let SkipDamagedJournal drop
	// the rest (an outside tester's store lost every key so, the recovery
	// checkpoint's GC removing the segments).
	zeroed := swapped.Clone()
	if err := kdbtest.ZeroRange(zeroed, "/db/"+last.String(), 0, 64); err != nil {
		t.Fatal(err)
	}
	extra := swapped.Clone()
	if err := vfs.WriteFileAtomic(extra, "/db/"+(last+1).String(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, fs := range map[string]*vfs.MemFS{"db.data": swapped, "db.data, last header zeroed": zeroed, "db.data, an empty segment after": extra} {
		for _, skip := range []bool{false, true} {
			o := segOpts(fs.Clone())
			o.SkipDamagedJournal = skip
			db, err := kdb.Open("/db", o)
			if err == nil {
				db.Close()
				t.Fatalf("%s of another store, SkipDamagedJournal %v: Open succeeded", name, skip)
			}
			if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "/db/db.data belongs to store") || !strings.Contains(err.Error(), "every journal segment") {
				t.Fatalf("%s of another store, SkipDamagedJournal %v: Open: %v, want ErrCorrupt naming db.data", name, skip, err)
			}
		}
	}
	one := mine.Clone()
	copyFile(theirs, one, "/db/"+last.String())
	_, err := kdb.Open("/db", segOpts(one))
	if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), last.String()+"@0") || strings.Contains(err.Error(), "every journal segment") {
		t.Fatalf("Open with one segment of another store: %v, want ErrCorrupt naming %s", err, last)
	}
}
