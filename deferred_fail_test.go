package kdb_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// Sync waits for the deferred transactions taken before it (deferred.go,
// syncDeferred): so every path that answers one must count it, or a Sync
// after a failure would wait forever. Writers mixing Defer, Submit and Put
// run until an injected I/O error (the k-th write or sync of the store,
// once, or from then on) fails the handle; then Sync and Close must
// return, and every done must have been called exactly once.
func TestDefer_SyncReturnsAfterEveryFailure(t *testing.T) {
	type point struct {
		op   vfs.Op
		n    int
		from bool
	}
	var points []point
	for n := 1; n <= 30; n++ {
		points = append(points, point{vfs.OpWrite, n, n%2 == 0}, point{vfs.OpSync, n, n%2 == 1})
	}
	for _, p := range points {
		t.Run(fmt.Sprintf("%v-%d-from=%v", p.op, p.n, p.from), func(t *testing.T) {
			efs := errfs.Wrap(vfs.NewMem())
			db, err := kdb.Open("/db", &kdb.Options{FS: efs, CheckpointInterval: -1, SyncInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			rule := errfs.OnNth(p.op, p.n, syscall.EIO)
			if p.from {
				rule = errfs.FromNth(p.op, p.n, syscall.EIO)
			}
			efs.AddRule(rule)
			var deferred, answered atomic.Int64
			done := func(error) { answered.Add(1) }
			put := func(tx *kdb.Txn) error { return tx.Put("d", []byte("k"), []byte("v")) }
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						if db.Defer(put, done) == nil {
							deferred.Add(1)
						}
						var err error
						switch i % 3 {
						case 0:
							var c *kdb.Commit
							if c, err = db.Submit(put); err == nil {
								err = c.Wait()
							}
						case 1:
							err = db.Put("p", fmt.Appendf(nil, "%d-%d", w, i), []byte("v"))
						case 2:
							err = db.Sync()
						}
						if err != nil {
							return
						}
					}
				}()
			}
			wg.Wait()
			if db.Err() == nil {
				t.Fatalf("the %d-th %v never failed the handle", p.n, p.op)
			}
			finished := make(chan error, 1)
			go func() { finished <- db.Sync() }()
			select {
			case <-finished:
			case <-time.After(10 * time.Second):
				t.Fatal("Sync did not return after the failure")
			}
			go func() { finished <- db.Close() }()
			select {
			case <-finished:
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return after the failure")
			}
			if d, a := deferred.Load(), answered.Load(); d != a {
				t.Fatalf("%d Defers accepted, %d done calls", d, a)
			}
		})
	}
}

// A deferred function that fails is answered with its error, by whichever
// path ran it (joined to a Submit, queued before a Put, run by Sync's own
// flush); a Sync after it returns at once.
func TestDefer_SyncAfterFailingFunctions(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("x")
	if err != nil {
		t.Fatal(err)
	}
	bad := func(tx *kdb.Txn) error { return fmt.Errorf("refused") }
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	hosts := []func() error{
		func() error { // joined to a Submit of its namespace
			c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("a", []byte("k"), []byte("v")) })
			if err == nil {
				err = c.Wait()
			}
			return err
		},
		func() error { // queued before a Submit of another namespace
			c, err := ns.Submit(func(tx *kdb.Txn) error { return tx.Put("a", []byte("k"), []byte("v")) })
			if err == nil {
				err = c.Wait()
			}
			return err
		},
		func() error { return db.Put("a", []byte("k"), []byte("v")) }, // queued before a Put
		func() error { return nil },                                   // run by Sync's flush
	}
	for i, host := range hosts {
		if err := db.Defer(bad, done); err != nil {
			t.Fatal(err)
		}
		if err := host(); err != nil {
			t.Fatal(err)
		}
		synced := make(chan error, 1)
		go func() { synced <- db.Sync() }()
		select {
		case err := <-synced:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("host %d: Sync did not return after a failed deferred function", i)
		}
		if got := failed.Load(); got != int64(i+1) {
			t.Fatalf("host %d: %d failed done calls, want %d", i, got, i+1)
		}
	}
}
