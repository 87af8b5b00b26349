package kdb_test

// Root-package misuse (found by an outside tester): panics in functions the caller
// hands to the DB. FIXED marks what was broken (now fixed); the rest are regression
// tests of contracts that hold.

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

func misuseOpts() *kdb.Options {
	return &kdb.Options{
		FS:           vfs.NewMem(),
		SyncInterval: time.Hour, // no timer flush of deferred transactions: the writers are the hosts
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		CloseWait:    time.Second,
	}
}

// muWithin runs f in a goroutine and fails the test if it does not return
// within d (the goroutine is leaked then: the store is wedged).
func muWithin(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Logf("goroutines:\n%s", buf)
		t.Fatalf("%s: still blocked after %v", what, d)
		return nil
	}
}

// submitPanics calls Submit with a function that panics, and recovers.
func submitPanics(s func(fn func(tx *kdb.Txn) error) (*kdb.Commit, error)) (r any) {
	defer func() { r = recover() }()
	_, _ = s(func(tx *kdb.Txn) error {
		_ = tx.Put("t", []byte("own"), []byte("v"))
		panic("submit fn boom")
	})
	return nil
}

// FIXED: TestMisuse_SubmitPanicLosesFoldedDeferred. Defer promises that
// fn runs (and done is called exactly once) and that Sync waits for every
// Defer made before it. A Defer in the same namespace as the next Submit is
// folded into that Submit's transaction (deferred.go, takeDeferred +
// tx.folded). If the Submit's own function panicked, submitTxn unwound
// without requeueDeferred (before the fix): the deferred transaction is dropped, its done is
// never called, its write never happens, and every later Sync (and
// Checkpoint, through syncDeferred) waits for ever on its epoch count.
func TestMisuse_SubmitPanicLosesFoldedDeferred(t *testing.T) {
	db, err := kdb.Open("/db", misuseOpts())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	if err := db.Defer(func(tx *kdb.Txn) error {
		return tx.Put("t", []byte("deferred"), []byte("d"))
	}, func(err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	if r := submitPanics(db.Submit); r == nil {
		t.Fatal("the Submit's panic did not reach its caller")
	}
	// The store goes on: a write, then Sync, which must have run (or
	// answered) the deferred transaction made before it.
	if err := muWithin(t, 5*time.Second, "Put after the panic", func() error {
		return db.Put("t", []byte("after"), []byte("a"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := muWithin(t, 5*time.Second, "Sync after the panic (waits for the Defer made before it)", db.Sync); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Logf("done: %v", err)
		if err == nil {
			if _, gerr := db.Get("t", []byte("deferred")); gerr != nil {
				t.Fatalf("done(nil) but the deferred write is not there: %v", gerr)
			}
		}
	default:
		t.Fatal("Sync returned but the deferred transaction's done was never called")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// FIXED: TestMisuse_SubmitPanicStrandsQueuedDeferred. A Defer in another
// namespace than the Submit is run by the Submit as a batch of its own,
// queued for the journal before the Submit's function runs (c.pre). When
// the function panicked, before the fix, nobody ever waited for that queued batch ("every
// request must be waited for": the commit leader is the goroutine that
// waits for the head of the queue), so the queue's head is never led:
// every later write of every goroutine blocks for ever, and the deferred
// transaction's done is never called.
func TestMisuse_SubmitPanicStrandsQueuedDeferred(t *testing.T) {
	db, err := kdb.Open("/db", misuseOpts())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace("other")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	if err := ns.Defer(func(tx *kdb.Txn) error {
		return tx.Put("t", []byte("deferred"), []byte("d"))
	}, func(err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	if r := submitPanics(db.Submit); r == nil {
		t.Fatal("the Submit's panic did not reach its caller")
	}
	if err := muWithin(t, 5*time.Second, "Put after the panic", func() error {
		return db.Put("t", []byte("after"), []byte("a"))
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("deferred done: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deferred transaction's done was never called")
	}
	if _, err := ns.Get("t", []byte("deferred")); err != nil {
		t.Fatalf("deferred write: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// REGRESSION (holds): a panic in an Update's or a Submit's function (with
// no deferred transaction involved) or a View's reaches the caller, writes
// nothing, and leaves the store usable: the locks are released, the
// nested-call mark is cleared (the same goroutine can write again), and
// Close does not wait for a View that panicked.
func TestMisuse_TxnAndViewPanicsLeaveStoreUsable(t *testing.T) {
	db, err := kdb.Open("/db", misuseOpts())
	if err != nil {
		t.Fatal(err)
	}
	recov := func(f func()) (r any) {
		defer func() { r = recover() }()
		f()
		return nil
	}
	if recov(func() {
		_ = db.Update(func(tx *kdb.Txn) error {
			_ = tx.Put("t", []byte("upd"), []byte("v"))
			panic("update boom")
		})
	}) == nil {
		t.Fatal("Update's panic swallowed")
	}
	if submitPanics(db.Submit) == nil {
		t.Fatal("Submit's panic swallowed")
	}
	if recov(func() {
		_ = db.View(func(s *kdb.Snapshot) error {
			it := s.Iter("t")
			it.First()
			panic("view boom")
		})
	}) == nil {
		t.Fatal("View's panic swallowed")
	}
	// Same goroutine: not mistaken for a nested call.
	if err := muWithin(t, 5*time.Second, "writes after panics", func() error {
		if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
			return err
		}
		if err := db.Update(func(tx *kdb.Txn) error { return tx.Put("t", []byte("k2"), []byte("v")) }); err != nil {
			return err
		}
		c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte("k3"), []byte("v")) })
		if err != nil {
			return err
		}
		if err := c.Wait(); err != nil {
			return err
		}
		return db.Sync()
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"upd", "own"} {
		if _, err := db.Get("t", []byte(k)); !errors.Is(err, kdb.ErrNotFound) {
			t.Fatalf("write of a panicking transaction %q: %v, want ErrNotFound", k, err)
		}
	}
	if st := db.Stats(); st.Views != 0 {
		t.Fatalf("Views still registered after a panicking View: %d", st.Views)
	}
	start := time.Now()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("Close waited %v (for the View that panicked?)", d)
	}
}
