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
