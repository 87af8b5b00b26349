package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// indexRef returns the journal reference that key of user index ix holds.
func indexRef(t *testing.T, db *DB, ix, key string) (journal.Location, bool) {
	t.Helper()
	var loc journal.Location
	var found bool
	err := db.latestView(func(s *Snapshot) error {
		tr, err := s.openTree(treeName(userTreePrefix, ix))
		if err != nil || tr == nil {
			return err
		}
		v, ok, err := tr.get([]byte(key))
		if err != nil || !ok {
			return err
		}
		seg, _, isRef := decodeRefHeader(v)
		if !isRef {
			t.Fatalf("%s/%s is not in the journal", ix, key)
		}
		loc, found = journal.Location{Segment: seg, Offset: int64(binary.LittleEndian.Uint64(v[5:]))}, true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return loc, found
}

// A move takes effect only while the key still holds the reference it
// names: a key overwritten, deleted or whose index was dropped since keeps
// its state (and a dropped index is not brought back), live and when the
// journal is replayed after a power loss.
func TestMove_OnlyFromTheReferenceItNames(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := Open("/db", &Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := bytes.Repeat([]byte("1"), 700), bytes.Repeat([]byte("2"), 700)
	put := func(ix, k string, v []byte) {
		if err := db.Put(ix, []byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	// "first"'s value lands where the second record of a later segment
	// will: segment 1 begins with the mark of the store's first checkpoint
	// (32 bytes), then a pad 32 bytes shorter than a record of "first".
	// Its overwrites rotate the journal until one lands at that offset of
	// a later segment: a move must tell the two apart by segment.
	put("a", "pad00", v1[:len(v1)-32])
	put("a", "first", v1)
	firstOld, _ := indexRef(t, db, "a", "first")
	for i := 0; ; i++ {
		put("a", "first", v2)
		if now, _ := indexRef(t, db, "a", "first"); now.Offset == firstOld.Offset && now.Segment != firstOld.Segment {
			break
		}
		if i == 1000 {
			t.Fatal("no overwrite landed at the first record's offset")
		}
	}
	put("a", "over", v1)
	overOld, _ := indexRef(t, db, "a", "over")
	put("a", "over", v2)
	put("a", "del", v1)
	delOld, _ := indexRef(t, db, "a", "del")
	if err := db.Delete("a", []byte("del")); err != nil {
		t.Fatal(err)
	}
	put("d", "gone", v1)
	goneOld, _ := indexRef(t, db, "d", "gone")
	b := NewBatch()
	b.DropIndex("d")
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	put("a", "kept", v1)
	keptOld, _ := indexRef(t, db, "a", "kept")
	// Checkpoint, so that the moves below are replayed after the crash.
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	move := func(ix, k string, v []byte, from journal.Location) op {
		return op{kind: opMoveJournal, tree: treeName(userTreePrefix, ix), key: []byte(k), value: v, from: from}
	}
	if err := db.commitMoves([]op{
		move("a", "first", v1, firstOld),
		move("a", "over", v1, overOld),
		move("a", "del", v1, delOld),
		move("d", "gone", v1, goneOld),
		move("a", "kept", v1, keptOld),
		move("a", "kept", v1, keptOld), // the second finds the first's copy: stale
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.j.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(db *DB, when string) {
		t.Helper()
		if v, err := db.Get("a", []byte("first")); err != nil || !bytes.Equal(v, v2) {
			t.Fatalf("%s: key overwritten at the same offset of another segment: %.4q, %v", when, v, err)
		}
		if v, err := db.Get("a", []byte("over")); err != nil || !bytes.Equal(v, v2) {
			t.Fatalf("%s: overwritten key: %.4q, %v", when, v, err)
		}
		if _, err := db.Get("a", []byte("del")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: deleted key: %v", when, err)
		}
		if _, err := db.Get("d", []byte("gone")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: dropped index: %v", when, err)
		}
		if err := db.View(func(s *Snapshot) error {
			if ok, err := s.Exists("d"); err != nil || ok {
				t.Fatalf("%s: dropped index exists again (%v)", when, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if v, err := db.Get("a", []byte("kept")); err != nil || !bytes.Equal(v, v1) {
			t.Fatalf("%s: moved key: %.4q, %v", when, v, err)
		}
		if now, _ := indexRef(t, db, "a", "kept"); now == keptOld {
			t.Fatalf("%s: the unchanged key was not moved", when)
		}
		if _, err := db.Check(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check(db, "live")
	img := fs.CrashClone(vfs.CrashOptions{})
	db2, err := Open("/db", &Options{FS: img, SegmentSize: 64 << 10, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r := db2.Recovery(); r.RecordsReplayed == 0 {
		t.Fatalf("nothing replayed: %+v", r)
	}
	check(db2, "replayed")
	if err := db2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// pinOnce writes "once" (index a) and then 100 overwrites of "hot" (index
// b), values kept in the journal, so that "once" pins the segments after
// it; it returns a put for more.
func pinOnce(t *testing.T, db *DB) func(ix, k string, v []byte) {
	t.Helper()
	put := func(ix, k string, v []byte) {
		t.Helper()
		if err := db.Put(ix, []byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "once", bytes.Repeat([]byte("o"), 1024))
	for i := range 100 {
		put("b", "hot", bytes.Repeat([]byte{byte(i)}, 4096))
	}
	return put
}

// TestCompact_MovesOnlyValuesOfPinnedSegments guards the pass's choice of
// values: only those in the candidate segments (before the last
// checkpoint's replay position) are copied forward. Moving every journal
// value instead loses nothing, so no space or crash test noticed, but
// rewrites all the live data kept in the journal at every pass (and can
// end a pass with candidates left behind, their segments still pinned).
func TestCompact_MovesOnlyValuesOfPinnedSegments(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, CheckpointInterval: -1,
		CheckpointBytes: 1 << 40, Sync: UnsafeSyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	put := pinOnce(t, db)
	// The pass runs here, not in the compactor the checkpoint wakes
	// (db.checkpoint, unlike Checkpoint, runs none itself).
	db.compaction.mu.Lock()
	defer db.compaction.mu.Unlock()
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	once, _ := indexRef(t, db, "a", "once")
	fresh := map[string]journal.Location{}
	for i := range 20 {
		k := string(rune('a'+i)) + "-fresh"
		put("c", k, bytes.Repeat([]byte("f"), 1024))
		fresh[k], _ = indexRef(t, db, "c", k)
	}
	n, err := db.compact()
	if err != nil || n == 0 {
		t.Fatalf("compact = %d, %v; want the pinned values moved", n, err)
	}
	if loc, _ := indexRef(t, db, "a", "once"); loc == once {
		t.Fatalf("once, in a pinned segment, still at %v", loc)
	}
	for k, before := range fresh {
		if loc, _ := indexRef(t, db, "c", k); loc != before {
			t.Fatalf("c/%s, written after the checkpoint, moved from %v to %v (%d values moved)", k, before, loc, n)
		}
	}
}

// Compact's moves are durable when it returns (its doc says so): after a
// power loss right then, the index still refers to the copies it made.
// (An outside tester's mutant, Compact without its journal sync, went
// unnoticed: no value is lost without it, the promise is.)
func TestCompact_MovesDurableOnReturn(t *testing.T) {
	fs := vfs.NewCrashableMem()
	o := &Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1, CheckpointBytes: 1 << 40}
	db, err := Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pinOnce(t, db)
	// db.checkpoint, unlike Checkpoint, runs no pass and wakes no
	// compactor: the pass below is Compact's.
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	before, _ := indexRef(t, db, "a", "once")
	n, err := db.Compact()
	if err != nil || n == 0 {
		t.Fatalf("Compact = %d, %v; want the pinned values moved", n, err)
	}
	moved, _ := indexRef(t, db, "a", "once")
	if moved == before {
		t.Fatalf("once, in a pinned segment, still at %v", moved)
	}
	o.FS = fs.CrashClone(vfs.CrashOptions{})
	db2, err := Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if loc, _ := indexRef(t, db2, "a", "once"); loc != moved {
		t.Fatalf("after a power loss right after Compact returned, once is at %v, want its copy at %v", loc, moved)
	}
	if v, err := db2.Get("a", []byte("once")); err != nil || !bytes.Equal(v, bytes.Repeat([]byte("o"), 1024)) {
		t.Fatalf("once after the power loss: %d bytes, %v", len(v), err)
	}
}
