package kdb_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func u64v(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }

// incr is a transaction function adding one to counter key of index.
func incr(t *testing.T, index, key string) func(tx *kdb.Txn) error {
	return func(tx *kdb.Txn) error {
		return tx.Put(index, []byte(key), u64v(getU64(t, tx, index, key)+1))
	}
}

// doneCounter counts the done calls of deferred transactions by outcome.
type doneCounter struct {
	ok, failed atomic.Int64
}

func (c *doneCounter) done(err error) {
	if err != nil {
		c.failed.Add(1)
	} else {
		c.ok.Add(1)
	}
}

// Deferred increments interleaved with submitted ones, from many
// goroutines, in the user indexes and a namespace: every one is counted
// once (each deferred function ran exactly once, ordered among the
// transactions), and every done reports success.
func TestDefer_OrderedAmongTransactions(t *testing.T) {
	db := openMem(t)
	ns, err := db.Namespace("x")
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 60
	var dc doneCounter
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				switch (w + i) % 4 {
				case 0:
					err = db.Defer(incr(t, "c", "n"), dc.done)
				case 1:
					err = ns.Defer(incr(t, "c", "n"), dc.done)
				case 2:
					var c *kdb.Commit
					if c, err = db.Submit(incr(t, "c", "n")); err == nil {
						err = c.Wait()
					}
				case 3:
					var c *kdb.Commit
					if c, err = ns.Submit(incr(t, "c", "n")); err == nil {
						err = c.Wait()
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	want := uint64(writers * each / 2)
	for _, get := range []func(string, []byte) ([]byte, error){db.Get, ns.Get} {
		v, err := get("c", []byte("n"))
		if err != nil || binary.LittleEndian.Uint64(v) != want {
			t.Errorf("counter %x %v, want %d", v, err, want)
		}
	}
	if dc.ok.Load() != int64(want) || dc.failed.Load() != 0 {
		t.Errorf("done: %d ok, %d failed; want %d ok", dc.ok.Load(), dc.failed.Load(), want)
	}
}

// A deferred function joins the next Submit in its namespace: one batch,
// one commit; a Put of another namespace's index gets it as a batch of its
// own before the Put's, in the same group.
func TestDefer_JoinsTheNextWrite(t *testing.T) {
	db := openMem(t)
	ns, _ := db.Namespace("x")
	var dc doneCounter
	if err := ns.Defer(func(tx *kdb.Txn) error { return tx.Put("a", []byte("k"), []byte("deferred")) }, dc.done); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Get("a", []byte("k")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("deferred write visible before any write: %v", err)
	}
	before := db.Stats()
	c, err := ns.Submit(func(tx *kdb.Txn) error {
		v, err := tx.Get("a", []byte("k")) // the deferred write, in this transaction
		if err != nil || string(v) != "deferred" {
			t.Errorf("the host reads %q %v", v, err)
		}
		return tx.Put("a", []byte("k2"), []byte("host"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	after := db.Stats()
	if n := after.Batches - before.Batches; n != 1 {
		t.Errorf("the Submit and the deferred transaction took %d batches, want 1", n)
	}
	if dc.ok.Load() != 1 {
		t.Errorf("done after the host's Wait: %d", dc.ok.Load())
	}
	if err := ns.Defer(func(tx *kdb.Txn) error { return tx.Put("a", []byte("k"), []byte("second")) }, dc.done); err != nil {
		t.Fatal(err)
	}
	before = db.Stats()
	if err := db.Put("u", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	after = db.Stats()
	if v, err := ns.Get("a", []byte("k")); err != nil || string(v) != "second" {
		t.Fatalf("after a Put: %q %v", v, err)
	}
	if b, c := after.Batches-before.Batches, after.Commits-before.Commits; b != 2 || c != 1 {
		t.Errorf("Put after a deferred transaction of another namespace: %d batches in %d commits, want 2 in 1", b, c)
	}
	if dc.ok.Load() != 2 {
		t.Errorf("done: %d", dc.ok.Load())
	}
}

// A deferred function that fails leaves nothing and does not fail the
// transaction it joined; one whose host fails runs again with the next.
func TestDefer_Failures(t *testing.T) {
	db := openMem(t)
	var dc doneCounter
	boom := errors.New("boom")
	if err := db.Defer(func(tx *kdb.Txn) error {
		_ = tx.Put("a", []byte("half"), []byte("x"))
		return boom
	}, func(err error) {
		if !errors.Is(err, boom) {
			t.Errorf("done of a failing deferred function: %v", err)
		}
		dc.done(err)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Defer(incr(t, "a", "n"), dc.done); err != nil {
		t.Fatal(err)
	}
	// The host fails: nothing of it, nor of the deferred, is written.
	_, err := db.Submit(func(tx *kdb.Txn) error {
		_ = tx.Put("a", []byte("host"), []byte("x"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing host: %v", err)
	}
	if _, err := db.Get("a", []byte("n")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("a failed host's deferred write is visible: %v", err)
	}
	if dc.failed.Load() != 1 || dc.ok.Load() != 0 {
		t.Fatalf("after the failed host: done %d ok, %d failed", dc.ok.Load(), dc.failed.Load())
	}
	c, err := db.Submit(incr(t, "a", "n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	v, err := db.Get("a", []byte("n"))
	if err != nil || binary.LittleEndian.Uint64(v) != 2 {
		t.Fatalf("counter %x %v, want 2 (the deferred increment ran once, with the second host)", v, err)
	}
	for _, k := range []string{"half", "host"} {
		if _, err := db.Get("a", []byte(k)); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", k, err)
		}
	}
	if dc.failed.Load() != 1 || dc.ok.Load() != 1 {
		t.Fatalf("done %d ok, %d failed; want 1 and 1", dc.ok.Load(), dc.failed.Load())
	}
}

// With no write after it, a deferred transaction is committed by the timer
// within SyncInterval, by Sync, by Checkpoint and by Close; after Close,
// Defer is ErrClosed; inside a transaction's function, ErrInvalid.
func TestDefer_CommittedWithoutAWrite(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CheckpointInterval: -1, SyncInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) func(tx *kdb.Txn) error {
		return func(tx *kdb.Txn) error { return tx.Put("a", []byte(k), []byte("v")) }
	}
	// The timer.
	if err := db.Defer(put("timer"), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := db.Get("a", []byte("timer")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timer never committed the deferred transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Sync and Checkpoint: durable on return (a power cut right after
	// keeps them).
	for _, c := range []struct {
		key string
		fn  func() error
	}{{"sync", db.Sync}, {"checkpoint", db.Checkpoint}} {
		if err := db.Defer(put(c.key), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.fn(); err != nil {
			t.Fatal(err)
		}
		img := mem.CrashClone(vfs.CrashOptions{})
		db2, err := kdb.Open("/db", &kdb.Options{FS: img, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db2.Get("a", []byte(c.key)); err != nil {
			t.Errorf("deferred, then %s, then a power cut: %v", c.key, err)
		}
		db2.Close()
	}
	// Inside a transaction's function.
	if err := db.Update(func(tx *kdb.Txn) error {
		if err := db.Defer(put("nested"), nil); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("Defer inside Update: %v, want ErrInvalid", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Close.
	if err := db.Defer(put("close"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Defer(put("late"), nil); !errors.Is(err, kdb.ErrClosed) {
		t.Errorf("Defer after Close: %v, want ErrClosed", err)
	}
	db, err = kdb.Open("/db", &kdb.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"timer", "sync", "checkpoint", "close"} {
		if _, err := db.Get("a", []byte(k)); err != nil {
			t.Errorf("%s after reopen: %v", k, err)
		}
	}
}

// An Update reads the deferred transactions' writes.
func TestDefer_BeforeUpdate(t *testing.T) {
	db := openMem(t)
	if err := db.Defer(incr(t, "a", "n"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *kdb.Txn) error {
		if n := getU64(t, tx, "a", "n"); n != 1 {
			t.Errorf("Update reads %d, want the deferred 1", n)
		}
		return tx.Put("a", []byte("n"), u64v(10))
	}); err != nil {
		t.Fatal(err)
	}
	v, err := db.Get("a", []byte("n"))
	if err != nil || binary.LittleEndian.Uint64(v) != 10 {
		t.Fatalf("%x %v", v, err)
	}
}

// Two deferred functions joining one Submit put the same key; the second
// fails: the first's value stays (the second's put did not replace it in
// place below its savepoint), and the host may then rewrite it.
func TestDefer_FailureKeepsTheEarlierPutOfAKey(t *testing.T) {
	db := openMem(t)
	var dc doneCounter
	put := func(v string, err error) func(tx *kdb.Txn) error {
		return func(tx *kdb.Txn) error {
			if perr := tx.Put("a", []byte("k"), []byte(v)); perr != nil {
				return perr
			}
			return err
		}
	}
	if err := db.Defer(put("first", nil), dc.done); err != nil {
		t.Fatal(err)
	}
	if err := db.Defer(put("failed", errors.New("boom")), dc.done); err != nil {
		t.Fatal(err)
	}
	c, err := db.Submit(func(tx *kdb.Txn) error {
		if v, err := tx.Get("a", []byte("k")); err != nil || string(v) != "first" {
			t.Errorf("the host reads %q %v, want the first deferred put", v, err)
		}
		return tx.Put("a", []byte("other"), []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get("a", []byte("k")); err != nil || string(v) != "first" {
		t.Fatalf("after the commit: %q %v, want first", v, err)
	}
	if dc.ok.Load() != 1 || dc.failed.Load() != 1 {
		t.Fatalf("done %d ok, %d failed; want 1 and 1", dc.ok.Load(), dc.failed.Load())
	}
}

// A deferred function that writes nothing, joining a transaction that
// writes nothing: its done is still called.
func TestDefer_DoneWhenNothingIsWritten(t *testing.T) {
	db := openMem(t)
	var dc doneCounter
	if err := db.Defer(func(*kdb.Txn) error { return nil }, dc.done); err != nil {
		t.Fatal(err)
	}
	c, err := db.Submit(func(*kdb.Txn) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if dc.ok.Load() != 1 {
		t.Fatalf("done called %d times with nil, want 1", dc.ok.Load())
	}
}

// A Sync called while the timer's flush is running a deferred transaction
// (taken from the queue, so Sync's own flush finds nothing) waits for it:
// when Sync returns, the transaction is applied, its done called, and its
// writes survive a power loss. Before, Sync found the queue empty, synced
// the journal without the transaction's batch and returned.
func TestDefer_SyncWaitsForTheTimersFlush(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CheckpointInterval: -1, SyncInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var done atomic.Int64
	if err := db.Defer(func(tx *kdb.Txn) error {
		once.Do(func() { close(entered); <-release })
		return tx.Put("d", []byte("k"), []byte("v"))
	}, func(err error) {
		if err == nil {
			done.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	<-entered // the timer's flush runs it, and waits
	syncWaitsFor(t, db, release, &done, "had not run")
	img := mem.CrashClone(vfs.CrashOptions{})
	db2, err := kdb.Open("/db", &kdb.Options{FS: img, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if v, err := db2.Get("d", []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after Sync and a power loss: %q %v, want the deferred write", v, err)
	}
}

// The same when a writer took the deferred transaction into its own
// (a Submit whose function has not returned yet): Sync waits for that
// writer's commit.
func TestDefer_SyncWaitsForItsHost(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var done atomic.Int64
	if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("d", []byte("k"), []byte("v")) },
		func(err error) {
			if err == nil {
				done.Add(1)
			}
		}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	hosted := make(chan error, 1)
	go func() {
		c, err := db.Submit(func(tx *kdb.Txn) error {
			close(entered)
			<-release
			return tx.Put("h", []byte("k"), []byte("v"))
		})
		if err == nil {
			err = c.Wait()
		}
		hosted <- err
	}()
	<-entered // the deferred transaction has joined the Submit's
	syncWaitsFor(t, db, release, &done, "was in a commit not yet made")
	if err := <-hosted; err != nil {
		t.Fatal(err)
	}
}

// syncWaitsFor calls Sync while a deferred transaction (putting "k" in
// index "d") is held back (closing release lets it go): Sync must not
// return before, and must then return nil with the transaction's write
// applied, and its done called once, by the goroutine that waited for its
// commit: Sync itself, or the Submit hosting it, whose Wait may come after
// Sync returns (Sync waits for the write, not for another goroutine's Wait).
func syncWaitsFor(t *testing.T, db *kdb.DB, release chan struct{}, done *atomic.Int64, held string) {
	t.Helper()
	synced := make(chan error, 1)
	go func() { synced <- db.Sync() }()
	select {
	case err := <-synced:
		close(release)
		t.Fatalf("Sync returned (%v) while the deferred transaction before it %s", err, held)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get("d", []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Sync returned before the deferred transaction's write was applied: %q, %v", v, err)
	}
	for deadline := time.Now().Add(10 * time.Second); done.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the deferred transaction's done: %d calls, want 1", done.Load())
		}
	}
}
