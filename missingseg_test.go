package kdb_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
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
