package kdb

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestMem_ActiveTableWinsOverFrozen guards the order in which reads consult
// the two mem tables while a checkpoint flushes the frozen one: a key
// changed in both has its newest version in the active table, for Get and
// for a cursor in either direction (the backward step keeps the first
// table's version of an equal key only by an explicit rule). The state is
// built as flushMem's first step builds it (the active table frozen, a new
// one taking the writes), without the flush itself, so it lasts.
func TestMem_ActiveTableWinsOverFrozen(t *testing.T) {
	db := openFrozenTestDB(t)
	for i := range 10 {
		if err := db.Put("t", fmt.Appendf(nil, "k%d", i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	freezeActiveTable(db)
	want := map[string]string{}
	for i := range 10 {
		want[fmt.Sprintf("k%d", i)] = "old"
	}
	for _, k := range []string{"k0", "k3", "k9"} {
		if err := db.Put("t", []byte(k), []byte("new")); err != nil {
			t.Fatal(err)
		}
		want[k] = "new"
	}
	if err := db.Delete("t", []byte("k5")); err != nil {
		t.Fatal(err)
	}
	delete(want, "k5")
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		v, err := db.Get("t", []byte(k))
		switch w, ok := want[k]; {
		case !ok && !errors.Is(err, ErrNotFound):
			t.Fatalf("Get(%s) = %q, %v; want ErrNotFound", k, v, err)
		case ok && (err != nil || string(v) != w):
			t.Fatalf("Get(%s) = %q, %v; want %q", k, v, err, w)
		}
	}
	wantFwd := "k0=new k1=old k2=old k3=new k4=old k6=old k7=old k8=old k9=new"
	err := db.View(func(s *Snapshot) error {
		var fwd, back []string
		it := s.Iter("t")
		for ok := it.First(); ok; ok = it.Next() {
			fwd = append(fwd, string(it.Key())+"="+string(it.Value()))
		}
		it = s.Iter("t")
		for ok := it.Last(); ok; ok = it.Prev() {
			back = append([]string{string(it.Key()) + "=" + string(it.Value())}, back...)
		}
		if got := strings.Join(fwd, " "); got != wantFwd {
			return fmt.Errorf("forward: %s, want %s", got, wantFwd)
		}
		if got := strings.Join(back, " "); got != wantFwd {
			return fmt.Errorf("backward: %s, want %s", got, wantFwd)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMem_MergeCursorOverTheIndex guards the merge of the mem tables with
// the index's cursor: a key both hold is returned once, with the mem
// tables' value (the index's entry is stepped over: for a key the mem
// tables delete, the index's old value would come back), and a cursor that
// turns from forward to backward lands on the key before the current one,
// not on the current one again.
func TestMem_MergeCursorOverTheIndex(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 6 {
		if err := db.Put("t", fmt.Appendf(nil, "k%d", i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil { // the keys are in the index now
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k4"} {
		if err := db.Put("t", []byte(k), []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Delete("t", []byte("k2")); err != nil { // in the index, deleted in the mem tables
		t.Fatal(err)
	}
	err = db.View(func(s *Snapshot) error {
		var fwd []string
		it := s.Iter("t")
		for ok := it.First(); ok; ok = it.Next() {
			fwd = append(fwd, string(it.Key())+"="+string(it.Value()))
		}
		if got, want := strings.Join(fwd, " "), "k0=old k1=new k3=old k4=new k5=old"; got != want {
			return fmt.Errorf("forward: %s, want %s", got, want)
		}
		it = s.Iter("t")
		var steps []string
		step := func(ok bool) {
			if ok {
				steps = append(steps, string(it.Key()))
			} else {
				steps = append(steps, "end")
			}
		}
		step(it.Seek([]byte("k3")))
		step(it.Next())
		step(it.Prev()) // turns around: k3, not k4 again
		step(it.Prev()) // k1: k2 is deleted
		step(it.Next()) // turns again: k3
		if got, want := strings.Join(steps, " "), "k3 k4 k3 k1 k3"; got != want {
			return fmt.Errorf("turning cursor: %s, want %s", got, want)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openFrozenTestDB opens a store in memory with no checkpoint but the
// test's own (none at Close), for tests that freeze the active mem table.
func openFrozenTestDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// freezeActiveTable freezes the active table as flushMem's first step does,
// without the flush, so that the "checkpoint in progress" state lasts.
func freezeActiveTable(db *DB) {
	st := db.mem.lockActive()
	db.mem.state.Store(&memState{active: newMemTable(), frozen: st.active, base: st.base})
	st.active.mu.Unlock()
}

// TestMem_DropInFrozenTableHidesTheIndexTree guards the reads' lower bound
// of a tree dropped in the frozen table (mem.go memView.lower, the
// frozen table's dropAt): an index checkpointed with k0..k2, dropped and
// made again with one key, then a checkpoint's flush begins. Without the
// bound the dropped keys came back (Get, Iter) while Len said 1, and a Put
// of one of them counted as an overwrite, leaving a wrong count behind.
// (From an outside tester's mutation hunt, 2026-12-08.)
func TestMem_DropInFrozenTableHidesTheIndexTree(t *testing.T) {
	db := openFrozenTestDB(t)
	for i := range 3 {
		if err := db.Put("t", fmt.Appendf(nil, "k%d", i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.DropIndex("t")
	b.Put("t", []byte("new"), []byte("v"))
	if err := db.Write(&b); err != nil {
		t.Fatal(err)
	}
	freezeActiveTable(db)
	if v, err := db.Get("t", []byte("k0")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(k0) during the flush = %q, %v; want ErrNotFound (dropped)", v, err)
	}
	var keys []string
	var n uint64
	err := db.View(func(s *Snapshot) error {
		var err error
		if n, err = s.Len("t"); err != nil {
			return err
		}
		it := s.Iter("t")
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, string(it.Key()))
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys, " "); got != "new" || n != 1 {
		t.Errorf("during the flush: keys %q, Len %d; want \"new\", 1", got, n)
	}
	// The writer path reads the same bound (latestLower): a Put of k1 now
	// must count as a new key.
	if err := db.Put("t", []byte("k1"), []byte("again")); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(s *Snapshot) error {
		var err error
		n, err = s.Len("t")
		return err
	})
	if err != nil || n != 2 {
		t.Errorf("Len after Put(k1) = %d, %v; want 2", n, err)
	}
}

// TestMem_LastFindsFFKeysInTheMemTables guards the backward start of a
// mem-table step (mem.go, seekLT from the tree's end): Last and Prev find
// the tree's last keys whatever their bytes, keys led by 0xff included
// (big-endian IDs with a high top byte).
func TestMem_LastFindsFFKeysInTheMemTables(t *testing.T) {
	db := openFrozenTestDB(t)
	keys := []string{"a", "\xff", "\xff\x00", "\xff\xff\x01"}
	for _, k := range keys {
		if err := db.Put("t", []byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	err := db.View(func(s *Snapshot) error {
		it := s.Iter("t")
		var back []string
		for ok := it.Last(); ok; ok = it.Prev() {
			back = append(back, fmt.Sprintf("%q", it.Key()))
		}
		want := []string{`"\xff\xff\x01"`, `"\xff\x00"`, `"\xff"`, `"a"`}
		if strings.Join(back, " ") != strings.Join(want, " ") {
			return fmt.Errorf("Last/Prev = %v, want %v", back, want)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTxn_OversizedPutInPlaceIsInvalid guards putInPlace's size check
// (txn.go): a Put over MaxValueSize of a key the transaction put already is
// ErrInvalid at once, like any oversized Put, and the Update fails with
// nothing written.
func TestTxn_OversizedPutInPlaceIsInvalid(t *testing.T) {
	db := openFrozenTestDB(t)
	big := make([]byte, MaxValueSize+1)
	var perr error
	err := db.Update(func(tx *Txn) error {
		if err := tx.Put("t", []byte("k"), []byte("small")); err != nil {
			return err
		}
		perr = tx.Put("t", []byte("k"), big)
		return nil
	})
	if !errors.Is(perr, ErrInvalid) || !errors.Is(err, ErrInvalid) {
		t.Errorf("second Put = %v, Update = %v; want ErrInvalid for both", perr, err)
	}
	if v, gerr := db.Get("t", []byte("k")); !errors.Is(gerr, ErrNotFound) {
		t.Errorf("Get after the failed Update = %d bytes, %v; want ErrNotFound", len(v), gerr)
	}
}
