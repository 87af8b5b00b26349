package kdb_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestDefer_RequeuedAfterAPanicKeepsItsPlace: a deferred transaction A
// folded into a Submit whose function panics is put back in the queue
// ahead of a B deferred meanwhile: they still commit in the order they
// were deferred (B's value is the last), never B then A.
func TestDefer_RequeuedAfterAPanicKeepsItsPlace(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	put := func(v string) func(tx *kdb.Txn) error {
		return func(tx *kdb.Txn) error { return tx.Put("t", []byte("k"), []byte(v)) }
	}
	if err := db.Defer(put("A"), nil); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = db.Submit(func(tx *kdb.Txn) error {
			done := make(chan error)
			go func() { done <- db.Defer(put("B"), nil) }() // another goroutine: Defer is refused inside fn
			if err := <-done; err != nil {
				t.Error(err)
			}
			panic("on purpose")
		})
	}()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get("t", []byte("k")); err != nil || string(v) != "B" {
		t.Fatalf("Defer A, then Defer B (while a Submit hosting A panicked): k = %q, %v; want B", v, err)
	}
}

// TestDefer_FailedFoldedFunctionLeavesNoOwnWrites: a deferred function
// folded into a Submit writes more keys than the transaction scans (so it
// indexes its own writes) and fails: its writes are rolled back, index
// included. The host's function then reads its own put, and not the
// failed function's keys (it read ErrNotFound for its own put, and the
// failed function's key with the host's value).
func TestDefer_FailedFoldedFunctionLeavesNoOwnWrites(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Defer(func(tx *kdb.Txn) error {
		for i := range 20 {
			if err := tx.Put("t", fmt.Appendf(nil, "k%d", i), []byte("bad")); err != nil {
				return err
			}
		}
		return errors.New("fail on purpose")
	}, nil); err != nil {
		t.Fatal(err)
	}
	var gx, gk []byte
	var ex, ek error
	c, err := db.Submit(func(tx *kdb.Txn) error {
		if err := tx.Put("t", []byte("x"), []byte("X")); err != nil {
			return err
		}
		gx, ex = tx.Get("t", []byte("x"))
		gk, ek = tx.Get("t", []byte("k0"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if string(gx) != "X" || ex != nil || !errors.Is(ek, kdb.ErrNotFound) {
		t.Fatalf("after a failed folded Defer: Get x = %q, %v (want X); Get k0 = %q, %v (want ErrNotFound)", gx, ex, gk, ek)
	}
}
