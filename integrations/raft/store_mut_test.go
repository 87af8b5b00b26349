package raftkdb

// Tests added by mutation testing of the Store: each guards a rule that a
// deliberate breakage of store.go removed without any other test failing.

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestMut_DeleteRangeOfTheWholeLogIsOneDrop guards DeleteRange's whole-log
// case (store.go, "min <= s.first && max >= s.last"): a range from the
// first entry (min equal to FirstIndex, as raft passes it) to the last or
// beyond is one atomic drop of the log's tree, as documented, not a
// deletion key by key in several batches (which a crash can cut).
func TestMut_DeleteRangeOfTheWholeLogIsOneDrop(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, nil)
	defer s.Close()
	for i := uint64(1); i <= 20; i++ {
		if err := s.StoreLog(entry(i, 1, 16)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRange(1, 20); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, s); f != 0 || l != 0 {
		t.Fatalf("after deleting everything: first %d last %d, want 0 0", f, l)
	}
	if err := s.ns.View(func(sn *kdb.Snapshot) error {
		names, err := sn.Indexes()
		if err != nil {
			return err
		}
		if slices.Contains(names, logIndex) {
			t.Errorf("the log's tree is still there after DeleteRange of the whole log (%v): deleted key by key, not dropped", names)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestMut_StoreLogsBelowFirstMovesFirstIndex guards StoreLogs' update of
// the cached bounds (store.go, "min(s.first, lo), max(s.last, hi)"):
// entries stored below the first one (after a compaction removed a
// prefix, say) make FirstIndex the lowest and leave LastIndex the highest,
// as the stored log and a reopen say.
func TestMut_StoreLogsBelowFirstMovesFirstIndex(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, nil)
	for i := uint64(10); i <= 12; i++ {
		if err := s.StoreLog(entry(i, 1, 16)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StoreLogs([]*raft.Log{entry(5, 1, 16), entry(6, 1, 16)}); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, s); f != 5 || l != 12 {
		t.Fatalf("after storing 5 and 6 below 10..12: first %d last %d, want 5 12", f, l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, nil)
	defer s.Close()
	if f, l := bounds(t, s); f != 5 || l != 12 {
		t.Fatalf("reopened: first %d last %d, want 5 12", f, l)
	}
}

// TestMut_StableKeyOfTheLargestSize guards Get's key bound (store.go,
// "len(key) > MaxStableKeySize"): a key of exactly MaxStableKeySize bytes,
// which Set takes, is read back by Get (not reported missing, which raft
// would take for a term or vote never set).
func TestMut_StableKeyOfTheLargestSize(t *testing.T) {
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	key := bytes.Repeat([]byte{'k'}, MaxStableKeySize)
	if err := s.Set(key, []byte("v")); err != nil {
		t.Fatalf("Set of a %d-byte key: %v", len(key), err)
	}
	if v, err := s.Get(key); err != nil || string(v) != "v" {
		t.Fatalf("Get of a %d-byte key: %q, %v; want \"v\"", len(key), v, err)
	}
	if err := s.SetUint64(key, 7); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64(key); err != nil || v != 7 {
		t.Fatalf("GetUint64 of a %d-byte key: %d, %v; want 7", len(key), v, err)
	}
}

// TestMut_StableValuesThatDoNotDecode guards the stable store's checks of
// what it reads back: GetUint64 of a value of more than 8 bytes (store.go,
// "len(v) != 8") and Get of a value without the version byte (store.go,
// "v[0] != stableVersion", a record of another version or damaged) are
// ErrCorrupt, not a value made of some of the bytes.
func TestMut_StableValuesThatDoNotDecode(t *testing.T) {
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	if err := s.Set([]byte("nine"), make([]byte, 9)); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("nine")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetUint64 of a 9-byte value: %d, %v; want ErrCorrupt", v, err)
	}
	b := s.ns.NewBatch()
	b.Put(stableIndex, stableKey([]byte("other")), []byte{stableVersion + 1, 'x'})
	if err := s.db.Write(b); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("other")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a value of version %d: %q, %v; want ErrCorrupt", stableVersion+1, v, err)
	}
}

// TestMut_BoundsOfAFailedStore guards FirstIndex's and LastIndex's check
// of the store's state (store.go, "s.db.Err()"): once an fsync failed,
// the cached bounds may name entries that are not durable, so both report
// the failure instead of an index raft would trust.
func TestMut_BoundsOfAFailedStore(t *testing.T) {
	var fail atomic.Bool
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if fail.Load() && e.Op == vfs.OpSync {
			return errors.New("injected fsync failure")
		}
		return nil
	})
	s := openMem(t, fs, nil)
	defer s.Close()
	if err := s.StoreLog(entry(1, 1, 16)); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := s.StoreLog(entry(2, 1, 16)); err == nil {
		t.Fatal("StoreLog with a failing fsync returned nil")
	}
	if i, err := s.FirstIndex(); err == nil {
		t.Errorf("FirstIndex of a failed store: %d, nil; want its error", i)
	}
	if i, err := s.LastIndex(); err == nil {
		t.Errorf("LastIndex of a failed store: %d, nil; want its error", i)
	}
}

// TestMut_StoreLogsSplitsAtHalfABatch guards StoreLogs' split (store.go,
// "size+n+32 > limit"): as documented, a call is one atomic kdb write when
// its entries, counted with 32 bytes of framing each, fit in half of
// db.MaxBatchSize, and transactions committed in order otherwise (the
// count is an estimate: the other half is the room it keeps). A call of
// small entries (inline in the batch record) that takes more than half is
// split, and every entry is stored.
func TestMut_StoreLogsSplitsAtHalfABatch(t *testing.T) {
	s := openMem(t, vfs.NewMem(), &kdb.Options{SegmentSize: 256 << 10})
	defer s.Close()
	half := s.db.MaxBatchSize() / 2
	call := func(from uint64, counted int) (n int, writes uint64) {
		t.Helper()
		var logs []*raft.Log
		size := 0
		for i := from; ; i++ {
			l := entry(i, 1, 40)
			if size+encodedSize(l)+32 > counted {
				break
			}
			size += encodedSize(l) + 32
			logs = append(logs, l)
		}
		before := s.db.Stats().Batches
		if err := s.StoreLogs(logs); err != nil {
			t.Fatalf("StoreLogs of %d entries, %d bytes counted (half a batch: %d): %v", len(logs), size, half, err)
		}
		return len(logs), s.db.Stats().Batches - before
	}
	n1, w := call(1, half)
	if w != 1 {
		t.Errorf("a call of %d entries that fits half a batch: %d kdb writes, want 1 (atomic)", n1, w)
	}
	n2, w := call(uint64(n1)+1, 2*half-64)
	if w < 2 {
		t.Errorf("a call of %d entries that takes a whole batch: %d kdb write, want it split at half a batch", n2, w)
	}
	if f, l := bounds(t, s); f != 1 || l != uint64(n1+n2) {
		t.Fatalf("first %d last %d, want 1 %d", f, l, n1+n2)
	}
}

// TestMut_LogKeyOfTheWrongLengthLast guards loadBounds' check of the last
// key (store.go, keyIndex of it.Last()): a log tree whose last key is not 8
// bytes (damage, or another writer's key) is ErrCorrupt at New, not a
// LastIndex of 0 under a first of 1.
func TestMut_LogKeyOfTheWrongLengthLast(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(db, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(1, 1, 16), entry(2, 1, 16)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := s.ns.NewBatch()
	b.Put(logIndex, append(logKey(3), 0), appendLog(nil, entry(3, 1, 16)))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	s2, err := New(db, DefaultNamespace)
	if !errors.Is(err, ErrCorrupt) {
		var f, l uint64
		if s2 != nil {
			f, l = bounds(t, s2)
			s2.Close()
		}
		t.Fatalf("New over a log whose last key is 9 bytes: %v (first %d last %d), want ErrCorrupt", err, f, l)
	}
}

// TestMut_DeleteRangeReportsAFailedWrite guards DeleteRange's check of each
// batch's write (store.go, the batch loop's "s.db.Write(b)"): a DeleteRange
// of part of the log (batches of deletions, not one drop) whose write fails
// returns the error. Ignored, it returned the bounds reloaded from the
// failed handle and nil, so raft took a compaction that deleted nothing for
// done. (From an outside tester's mutation hunt, 2026-12-08.)
func TestMut_DeleteRangeReportsAFailedWrite(t *testing.T) {
	for n := int64(1); n <= 4; n++ {
		var syncs atomic.Int64
		var fail atomic.Bool
		fs := vfs.Intercept(vfs.NewCrashableMem(), func(e vfs.Event) error {
			if fail.Load() && e.Op == vfs.OpSync && syncs.Add(1) >= n {
				return errors.New("injected fsync failure")
			}
			return nil
		})
		s := openMem(t, fs, &kdb.Options{SegmentSize: 64 << 10, CheckpointInterval: -1})
		var logs []*raft.Log
		for i := uint64(1); i <= 3000; i++ {
			logs = append(logs, entry(i, 1, 10))
		}
		for len(logs) > 0 {
			k := min(100, len(logs))
			if err := s.StoreLogs(logs[:k]); err != nil {
				t.Fatal(err)
			}
			logs = logs[k:]
		}
		fail.Store(true)
		if err := s.DeleteRange(1, 2900); err == nil { // a prefix: batches, not a drop
			t.Errorf("fsync %d from now fails: DeleteRange(1, 2900) returned nil", n)
		}
		s.Close()
	}
}

// TestMut_GetOfAnOverlongStableKey guards Get's bound (store.go, "len(key) >
// MaxStableKeySize"): a key longer than Set takes cannot have been set, and
// Get says ErrKeyNotFound, which raft reads as "not set", not kdb's
// ErrInvalid for a key it refuses, which raft would take for a failure.
func TestMut_GetOfAnOverlongStableKey(t *testing.T) {
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	for _, n := range []int{MaxStableKeySize + 1, MaxStableKeySize + 2, kdb.MaxKeySize + 10} {
		if _, err := s.Get(bytes.Repeat([]byte{'k'}, n)); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("Get of a %d-byte key: %v, want ErrKeyNotFound", n, err)
		}
	}
}

// TestMut_DataDoesNotAliasExtensions guards the codec's field bound
// (codec.go, "p[:n:n]"): a log's Data read back has no spare capacity that
// reaches into the bytes of its Extensions, so an FSM appending to l.Data
// cannot change l.Extensions.
func TestMut_DataDoesNotAliasExtensions(t *testing.T) {
	s := openMem(t, vfs.NewMem(), nil)
	defer s.Close()
	if err := s.StoreLog(&raft.Log{Index: 1, Term: 1, Data: []byte("data"), Extensions: []byte("ext")}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(1, &l); err != nil {
		t.Fatal(err)
	}
	_ = append(l.Data, "XXXXXXX"...)
	if string(l.Extensions) != "ext" {
		t.Fatalf("an append to Data changed Extensions to %q", l.Extensions)
	}
}
