package kdb_test

import (
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// A deferred function that calls runtime.Goexit (what t.FailNow and
// t.Fatal do) ends the goroutine hosting it, another caller's write or the
// timer's: that cannot be stopped. It used to leave the transaction lock
// held (every later write, Sync, Checkpoint and Close waited for ever), or,
// in a Submit of its namespace, be put back and end the next host's
// goroutine too. Now its done gets ErrInvalid, a function deferred after
// it still runs, and the store goes on: every host, each way a deferred
// function is run.
func TestDefer_GoexitInFunctionLeavesDBUsable(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	put := func(tx *kdb.Txn) error { return tx.Put("t", []byte("host"), []byte("h")) }
	hosts := map[string]func(db *kdb.DB) error{
		"put": func(db *kdb.DB) error { return db.Put("t", []byte("host"), []byte("h")) },
		"write": func(db *kdb.DB) error {
			b := kdb.NewBatch()
			b.Put("t", []byte("host"), []byte("h"))
			return db.Write(b)
		},
		"update": func(db *kdb.DB) error { return db.Update(put) },
		// The deferred functions join the Submit's transaction (folded).
		"submit": func(db *kdb.DB) error {
			c, err := db.Submit(put)
			if err != nil {
				return err
			}
			return c.Wait()
		},
		// A Submit in another namespace runs them as batches of their own.
		"submit-namespace": func(db *kdb.DB) error {
			ns, err := db.Namespace("other")
			if err != nil {
				return err
			}
			c, err := ns.Submit(put)
			if err != nil {
				return err
			}
			return c.Wait()
		},
		"sync":  func(db *kdb.DB) error { return db.Sync() },
		"timer": nil,
	}
	for name, host := range hosts {
		t.Run(name, func(t *testing.T) {
			db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: 20 * time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if host != nil {
				// The timer would host them first.
				db.Close()
				if db, err = kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: time.Hour, Logger: quiet}); err != nil {
					t.Fatal(err)
				}
			}
			defer db.Close()
			bad, next := make(chan error, 2), make(chan error, 2)
			if err := db.Defer(func(tx *kdb.Txn) error {
				if err := tx.Put("t", []byte("bad"), []byte("x")); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			}, func(err error) { bad <- err }); err != nil {
				t.Fatal(err)
			}
			if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("t", []byte("next"), []byte("y")) },
				func(err error) { next <- err }); err != nil {
				t.Fatal(err)
			}
			if host != nil {
				exited := make(chan struct{})
				go func() {
					defer close(exited)
					_ = host(db)
				}()
				<-exited
			}
			select {
			case err := <-bad:
				if !errors.Is(err, kdb.ErrInvalid) {
					t.Fatalf("done of the function that called Goexit: %v, want ErrInvalid", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("done of the function that called Goexit never called")
			}
			// The store goes on: the function deferred after it, a write,
			// Sync, and (deferred) Close, each within a bound.
			res := make(chan error, 1)
			go func() {
				if err := db.Put("t", []byte("after"), []byte("z")); err != nil {
					res <- err
					return
				}
				res <- db.Sync()
			}()
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("a Put and Sync after it: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a Put and Sync after it hang")
			}
			select {
			case err := <-next:
				if err != nil {
					t.Fatalf("the function deferred after it: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the function deferred after it never ran")
			}
			if _, err := db.Get("t", []byte("bad")); !errors.Is(err, kdb.ErrNotFound) {
				t.Fatalf("the write of the function that called Goexit: %v, want ErrNotFound", err)
			}
			for _, k := range []string{"next", "after"} {
				if _, err := db.Get("t", []byte(k)); err != nil {
					t.Fatalf("%s: %v", k, err)
				}
			}
			// Once more: nothing of it left queued to end another host.
			if err := db.Put("t", []byte("again"), []byte("z")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
