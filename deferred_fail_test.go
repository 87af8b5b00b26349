package kdb_test

import (
	"errors"
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

// A deferred function that returns an error wrapping ErrClosed (it called
// something on a closed handle of its own, say) fails alone: the error is
// its own, not the DB's state, so the write that hosts it and the other
// deferred functions run with it commit as if it had returned any other
// error. Each host path is tried: queued before a Put, before a Submit of
// another namespace, joined to a Submit of its namespace, before an
// Update, and run by Sync's own flush.
func TestDefer_AFunctionsClosedErrorFailsItAlone(t *testing.T) {
	hosts := []struct {
		name string
		run  func(db *kdb.DB, ns *kdb.Namespace) error
	}{
		{"Put", func(db *kdb.DB, ns *kdb.Namespace) error {
			return db.Put("h", []byte("host"), []byte("v"))
		}},
		{"SubmitOtherNamespace", func(db *kdb.DB, ns *kdb.Namespace) error {
			c, err := ns.Submit(func(tx *kdb.Txn) error { return tx.Put("h", []byte("host"), []byte("v")) })
			if err == nil {
				err = c.Wait()
			}
			return err
		}},
		{"SubmitJoined", func(db *kdb.DB, ns *kdb.Namespace) error {
			c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("h", []byte("host"), []byte("v")) })
			if err == nil {
				err = c.Wait()
			}
			return err
		}},
		{"Update", func(db *kdb.DB, ns *kdb.Namespace) error {
			return db.Update(func(tx *kdb.Txn) error { return tx.Put("h", []byte("host"), []byte("v")) })
		}},
		{"Sync", func(db *kdb.DB, ns *kdb.Namespace) error { return db.Sync() }},
	}
	for _, h := range hosts {
		for _, cause := range []error{kdb.ErrClosed, kdb.ErrFailed} {
			t.Run(fmt.Sprintf("%s/%v", h.name, cause), func(t *testing.T) {
				db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SyncInterval: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := db.Close(); err != nil {
						t.Error(err)
					}
				}()
				ns, err := db.Namespace("x")
				if err != nil {
					t.Fatal(err)
				}
				badErr := fmt.Errorf("its own handle: %w", cause)
				const n = 4
				const bad = 1
				var mu sync.Mutex
				dones := make([][]error, n)
				for i := range n {
					fn := func(tx *kdb.Txn) error {
						return tx.Put("d", fmt.Appendf(nil, "k%d", i), []byte("v"))
					}
					if i == bad {
						fn = func(tx *kdb.Txn) error {
							if err := tx.Put("d", []byte("bad"), []byte("v")); err != nil {
								return err
							}
							return badErr
						}
					}
					done := func(err error) {
						mu.Lock()
						dones[i] = append(dones[i], err)
						mu.Unlock()
					}
					if err := db.Defer(fn, done); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.run(db, ns); err != nil {
					t.Fatalf("the host failed with its deferred function's error: %v", err)
				}
				if err := db.Sync(); err != nil {
					t.Fatalf("Sync after the host: %v", err)
				}
				if err := db.Err(); err != nil {
					t.Fatalf("the handle failed: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				for i, got := range dones {
					switch {
					case len(got) != 1:
						t.Errorf("deferred function %d: %d done calls %v, want 1", i, len(got), got)
					case i == bad && !errors.Is(got[0], badErr):
						t.Errorf("the failing deferred function's done got %v, want its own error %v", got[0], badErr)
					case i != bad && got[0] != nil:
						t.Errorf("deferred function %d failed with another's error: %v", i, got[0])
					}
				}
				get := func(index, key string) ([]byte, error) {
					if h.name == "SubmitOtherNamespace" && index == "h" {
						return ns.Get(index, []byte(key))
					}
					return db.Get(index, []byte(key))
				}
				if _, err := get("h", "host"); err != nil && h.name != "Sync" {
					t.Errorf("the host's write: %v", err)
				}
				for i := range n {
					key := fmt.Sprintf("k%d", i)
					_, err := get("d", key)
					switch {
					case i == bad:
						if _, err := get("d", "bad"); !errors.Is(err, kdb.ErrNotFound) {
							t.Errorf("the failing function's write: %v, want ErrNotFound", err)
						}
					case err != nil:
						t.Errorf("deferred function %d's write %s: %v", i, key, err)
					}
				}
			})
		}
	}
}
