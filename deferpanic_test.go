package kdb_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestDefer_PanicsDoNotWedgeTheStore: a deferred function runs in another
// caller's write (with the transaction lock held) or on the SyncInterval
// timer's goroutine. Its panic used to come out of the next, unrelated Put
// and leave the lock held (every later write blocked for ever), or end the
// process from the timer; a panicking done did the same. Now a panic of
// the function is its error (ErrInvalid, its writes discarded, done told),
// a panic of done is logged, and the store goes on.
func TestDefer_PanicsDoNotWedgeTheStore(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, via := range []string{"write", "timer", "sync"} {
		t.Run(via, func(t *testing.T) {
			db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: 20 * time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			got := make(chan error, 1)
			if err := db.Defer(func(tx *kdb.Txn) error {
				if err := tx.Put("t", []byte("half"), []byte("x")); err != nil {
					return err
				}
				panic("boom")
			}, func(err error) { got <- err }); err != nil {
				t.Fatal(err)
			}
			if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("t", []byte("ok"), []byte("y")) },
				func(error) { panic("done boom") }); err != nil {
				t.Fatal(err)
			}
			switch via {
			case "write":
				if err := db.Put("t", []byte("host"), []byte("z")); err != nil {
					t.Fatalf("the next Put: %v", err)
				}
			case "sync":
				if err := db.Sync(); err != nil {
					t.Fatalf("Sync: %v", err)
				}
			}
			select {
			case err := <-got:
				if !errors.Is(err, kdb.ErrInvalid) {
					t.Fatalf("done of the panicking function: %v, want ErrInvalid", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("done of the panicking function never called")
			}
			// The store goes on: writes, an Update, a Sync.
			done := make(chan error, 1)
			go func() {
				err := db.Put("t", []byte("after"), []byte("w"))
				if err == nil {
					err = db.Update(func(tx *kdb.Txn) error { return tx.Put("t", []byte("upd"), []byte("v")) })
				}
				if err == nil {
					err = db.Sync()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("writes after the panics blocked")
			}
			if _, err := db.Get("t", []byte("half")); !errors.Is(err, kdb.ErrNotFound) {
				t.Fatalf("the panicking function's write: %v, want it discarded", err)
			}
			if v, err := db.Get("t", []byte("ok")); err != nil || string(v) != "y" {
				t.Fatalf("the write whose done panicked: %q, %v", v, err)
			}
		})
	}
}
