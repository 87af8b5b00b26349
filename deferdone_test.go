package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestDefer_DoneCallingTheDB: a deferred transaction's done runs on the
// goroutine that waited for the commit, holding the DB's write locks (and
// txMu when its function failed), and Sync waits for every done: Sync,
// Checkpoint, Update and Close called in a done hung for good, and a write
// in the done of a failed function waited for itself. Now the calls that
// take the write locks (Put, Write, Delete, Submit, Update, Compact, Close)
// return ErrInvalid in a done, whether its function succeeded or failed,
// and the others (reads, Sync, Checkpoint, Defer) return.
func TestDefer_DoneCallingTheDB(t *testing.T) {
	refused := map[string]bool{"Put": true, "Submit": true, "Update": true, "Compact": true, "Close": true}
	calls := map[string]func(db *kdb.DB) error{
		"Sync":       func(db *kdb.DB) error { return db.Sync() },
		"Checkpoint": func(db *kdb.DB) error { return db.Checkpoint() },
		"Compact":    func(db *kdb.DB) error { _, err := db.Compact(); return err },
		"Put":        func(db *kdb.DB) error { return db.Put("a", []byte("x"), []byte("y")) },
		"Update":     func(db *kdb.DB) error { return db.Update(func(tx *kdb.Txn) error { return nil }) },
		"Submit": func(db *kdb.DB) error {
			_, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("a", []byte("s"), []byte("v")) })
			return err
		},
		"Get":    func(db *kdb.DB) error { _, err := db.Get("a", []byte("k")); return err },
		"View":   func(db *kdb.DB) error { return db.View(func(s *kdb.Snapshot) error { return nil }) },
		"Export": func(db *kdb.DB) error { _, err := db.Export(&bytes.Buffer{}); return err },
		"Defer":  func(db *kdb.DB) error { return db.Defer(func(tx *kdb.Txn) error { return nil }, nil) },
		"Close":  func(db *kdb.DB) error { return db.Close() },
	}
	fnErr := errors.New("the deferred function fails")
	for _, failing := range []bool{false, true} {
		for name, call := range calls {
			t.Run(fmt.Sprintf("%s/failing=%v", name, failing), func(t *testing.T) {
				db, err := kdb.Open(t.TempDir(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Put("a", []byte("k"), []byte("v")); err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				fn := func(tx *kdb.Txn) error {
					if failing {
						return fnErr
					}
					return tx.Put("a", []byte("d"), []byte("v"))
				}
				if err := db.Defer(fn, func(error) { got <- call(db) }); err != nil {
					t.Fatal(err)
				}
				hostDone := make(chan error, 1)
				go func() { hostDone <- db.Put("a", []byte("host"), []byte("v")) }()
				select {
				case err := <-got:
					if refused[name] != errors.Is(err, kdb.ErrInvalid) {
						t.Errorf("%s in a done: %v; want ErrInvalid: %v", name, err, refused[name])
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s called in a deferred transaction's done did not return in 10 s", name)
				}
				select {
				case err := <-hostDone:
					if err != nil {
						t.Errorf("the write hosting the deferred transaction: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("the write hosting the deferred transaction did not return in 10 s")
				}
				if err := db.Close(); err != nil && name != "Close" {
					t.Errorf("Close: %v", err)
				}
			})
		}
	}
}
