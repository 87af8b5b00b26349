package kdb

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// syncGate blocks the journal's syncs while armed: each one announces
// itself on entered and waits for a value on release (its outcome), or
// for open (a failed test lets everything through, so that it ends).
type syncGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan error
	open    chan struct{}
	once    sync.Once
}

func newSyncGate() *syncGate {
	return &syncGate{entered: make(chan struct{}, 16), release: make(chan error), open: make(chan struct{})}
}

func (g *syncGate) hook(e vfs.Event) error {
	if e.Op == vfs.OpSync && strings.Contains(e.Path, ".log") && g.armed.Load() {
		select {
		case g.entered <- struct{}{}:
		case <-g.open:
			return nil
		}
		select {
		case err := <-g.release:
			return err
		case <-g.open:
			return nil
		}
	}
	return nil
}

// unblock lets every sync through from now on.
func (g *syncGate) unblock() {
	g.armed.Store(false)
	g.once.Do(func() { close(g.open) })
}

// groupSyncing opens a DB whose journal syncs g holds, and leaves it with a
// group of two puts (a and b) written and its leader inside its sync, and
// waits until the follower applied the group (applyJob). It returns the
// puts' outcomes. When the test ends, every sync is let through before
// the DB is closed.
func groupSyncing(t *testing.T) (*DB, *syncGate, <-chan error) {
	t.Helper()
	g := newSyncGate()
	db, err := Open("/db", &Options{FS: vfs.Intercept(vfs.NewMem(), g.hook), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(g.unblock) // first: a failed test's Close does not wait for a held sync
	g.armed.Store(true)
	out := make(chan error, 3)
	// A first put leads and waits in its sync...
	go func() { out <- db.Put("t", []byte("w0"), []byte("v")) }()
	<-g.entered
	// ... while a and b queue behind it, as one group.
	for _, k := range []string{"a", "b"} {
		go func() { out <- db.Put("t", []byte(k), []byte("v-"+k)) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := &db.cq
		q.mu.Lock()
		n := 0
		for _, r := range q.mu.queue {
			if r.waiting.Load() {
				n++
			}
		}
		q.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a and b never queued")
		}
		time.Sleep(time.Millisecond)
	}
	jobs := db.cq.jobsApplied.Load()
	g.release <- nil // w0 is durable; a and b are written, and their sync waits
	<-g.entered
	for db.cq.jobsApplied.Load() == jobs {
		if time.Now().After(deadline) {
			t.Fatal("the group of a and b was not applied by a follower while its sync ran")
		}
		time.Sleep(time.Millisecond)
	}
	return db, g, out
}

// A group applied by a follower while its leader syncs it (applyJob) is
// not seen by readers until the sync is done: a reader never sees a write
// that is not durable.
func TestApplyJob_UnseenUntilSynced(t *testing.T) {
	db, g, out := groupSyncing(t)
	for _, k := range []string{"a", "b"} {
		if v, err := db.Get("t", []byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s read before its sync ended: %q, %v", k, v, err)
		}
	}
	time.Sleep(20 * time.Millisecond) // time for a wrong answer to arrive
	if n := len(out); n > 1 {
		t.Fatalf("%d puts returned before their group's sync ended (only w0, synced before, may have)", n)
	}
	g.armed.Store(false)
	g.release <- nil
	for range 3 {
		if err := <-out; err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if v, err := db.Get("t", []byte(k)); err != nil || string(v) != "v-"+k {
			t.Fatalf("%s after its put returned: %q, %v", k, v, err)
		}
	}
}

// When the sync of a group a follower applied fails, the handle fails, the
// group's writers get the error, and its versions are never seen: not by
// readers, not by a checkpoint.
func TestApplyJob_FailedSyncNeverSeen(t *testing.T) {
	db, g, out := groupSyncing(t)
	g.armed.Store(false)
	g.release <- fmt.Errorf("injected: %w", syscall.EIO)
	fails := 0
	for range 3 {
		if err := <-out; err != nil {
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("put: %v, want ErrFailed", err)
			}
			fails++
		}
	}
	if fails != 2 {
		t.Fatalf("%d puts failed, want a and b", fails)
	}
	for _, k := range []string{"a", "b"} {
		if v, err := db.Get("t", []byte(k)); err == nil {
			t.Fatalf("%s read after its sync failed: %q", k, v)
		}
	}
	// The checkpointer's path (Checkpoint refuses a failed handle first).
	if err := db.checkpoint(); err == nil {
		t.Fatal("checkpoint of a failed handle succeeded")
	}
	for _, k := range []string{"a", "b"} {
		if v, err := db.Get("t", []byte(k)); err == nil {
			t.Fatalf("%s read after a checkpoint of the failed handle: %q", k, v)
		}
	}
	if err := db.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: %v, want ErrFailed", err)
	}
}

// With one P the follower applies its group before the leader's fdatasync
// (the leader yields to it once journal.Write has started the group's
// write-back), not after it: the sync holds the only P, so an apply left
// for the follower would otherwise wait for the whole sync and then run
// alone. Checked at each journal sync: the last group handed to a
// follower is applied already.
func TestApplyJob_OnePAppliesBeforeTheSync(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var db atomic.Pointer[DB]
	var lastHanded, withJob, appliedBefore atomic.Int64
	hook := func(e vfs.Event) error {
		d := db.Load()
		if e.Op != vfs.OpSync || !strings.Contains(e.Path, ".log") || d == nil {
			return nil
		}
		h, a := int64(d.cq.jobsHanded.Load()), int64(d.cq.jobsApplied.Load())
		if h > lastHanded.Swap(h) {
			withJob.Add(1)
			if a == h {
				appliedBefore.Add(1)
			}
		}
		// A fast disk's fdatasync: a blocking system call.
		ts := syscall.NsecToTimespec(int64(100 * time.Microsecond))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
		return nil
	}
	d, err := Open("/db", &Options{FS: vfs.Intercept(vfs.NewMem(), hook), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	db.Store(d)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if err := d.Put("t", fmt.Appendf(nil, "%02d-%03d", w, i), []byte("v")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d syncs of a group a follower applies came after its apply", appliedBefore.Load(), withJob.Load())
	if withJob.Load() < 20 || appliedBefore.Load() < withJob.Load()*9/10 {
		t.Fatalf("%d of %d syncs of a group a follower applies came after its apply", appliedBefore.Load(), withJob.Load())
	}
}
