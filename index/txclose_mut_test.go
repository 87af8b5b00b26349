package index

// Tests added by mutation testing of the Store's transactions: each guards
// a rule that a deliberate breakage of store.go removed without any other
// test failing.

import (
	"errors"
	"testing"
)

// TestView_ReturnsTheFailureFnIgnored guards View's check of the Tx's
// failure (store.go, "tx.err"): a View whose fn returns nil although a read
// inside it failed returns that failure (Tx.Tree has no error result and
// reports a damaged catalog page only this way), not nil for "no such tree".
// (From an outside tester's mutation hunt, 2026-12-08.)
func TestView_ReturnsTheFailureFnIgnored(t *testing.T) {
	e := fillEnv(t)
	var cat = e.s.mu.cur.catalog
	_, p, err := e.pf.Read(cat)
	if err != nil {
		t.Fatal(err)
	}
	// The catalog's root page becomes a page of another type (valid checksum).
	if err := e.pf.Write(cat, pagePending, append([]byte(nil), p...)); err != nil {
		t.Fatal(err)
	}
	err = e.s.View(func(tx *Tx) error {
		if tx.Tree([]byte("never-looked-up")) == nil {
			return nil // "no such tree": fn ignores why
		}
		return nil
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("View = %v, want ErrCorrupt (the catalog read failed)", err)
	}
}

// TestPin_TxClosedAfterRelease guards release's closing of a pinned Tx
// (store.go Pin): its pages may be freed and reused from then on, so the Tx
// is refused (ErrTxClosed) rather than reading them.
func TestPin_TxClosedAfterRelease(t *testing.T) {
	e := fillEnv(t)
	tx, release := e.s.Pin()
	release()
	if _, err := tx.OpenTree([]byte("t")); !errors.Is(err, ErrTxClosed) {
		t.Fatalf("OpenTree after release = %v, want ErrTxClosed", err)
	}
}

// TestView_TxClosedAfterView guards View's closing of its Tx (store.go): a
// Tx or Tree kept past the View is refused (ErrTxClosed) rather than
// reading pages that may be freed and reused since.
func TestView_TxClosedAfterView(t *testing.T) {
	e := fillEnv(t)
	var kept *Tx
	var tr *Tree
	e.view(func(tx *Tx) error { kept, tr = tx, tx.Tree([]byte("t")); return nil })
	if _, err := kept.OpenTree([]byte("t")); !errors.Is(err, ErrTxClosed) {
		t.Errorf("OpenTree after View = %v, want ErrTxClosed", err)
	}
	if _, _, err := tr.Get([]byte("k0001")); !errors.Is(err, ErrTxClosed) {
		t.Errorf("Tree.Get after View = %v, want ErrTxClosed", err)
	}
}
