package kdb

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// slowSyncMem is a MemFS whose journal fdatasyncs take 3 ms while slow is
// set: a leader holds its role that long.
func slowSyncMem(slow *atomic.Bool) vfs.FS {
	return vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync && strings.Contains(e.Path, ".log") && slow.Load() {
			time.Sleep(3 * time.Millisecond)
		}
		return nil
	})
}

// mustReturn fails the test if fn has not returned within 10 s.
func mustReturn(t *testing.T, what string, fn func() error) {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- fn() }()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10 s (a lost wake-up)", what)
	}
}

// A hand-off that marks a Submit's batch held, having found no writer
// waiting behind it, must not miss a writer that comes to wait at that
// moment (an outside tester, 2026-12-07, by a sleep injected there):
// giveLeadLocked stored held after reading the waiting flags, and a writer
// that set its flag in between and read held before it was stored blocked
// behind the held batch, which nobody led. held is stored first now. The
// hooks play that order: the hand-off reads the flags, the writer sets its
// flag and reads held, then the hand-off goes on.
func TestCommitQueue_HeldMarkMissesNoWriter(t *testing.T) {
	var slow atomic.Bool
	db, err := Open("/db", &Options{FS: slowSyncMem(&slow)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	scanned, read := make(chan struct{}), make(chan struct{})
	var once, onceRead atomic.Bool
	testHookHeldMarked = func() {
		if once.CompareAndSwap(false, true) {
			close(scanned)
			select { // the writer reads held meanwhile
			case <-read:
			case <-time.After(time.Second):
			}
		}
	}
	testHookWait = func(r *commitReq, afterRead bool) {
		if len(r.ops) != 3 { // the Write's batch below
			return
		}
		if !afterRead {
			<-scanned
		} else if onceRead.CompareAndSwap(false, true) {
			close(read)
		}
	}
	defer func() { testHookHeldMarked, testHookWait = nil, nil }()
	slow.Store(true)
	xdone := make(chan error, 1)
	go func() { xdone <- db.Put("x", []byte("k"), []byte("v")) }() // leads, its sync 3 ms
	time.Sleep(500 * time.Microsecond)
	c, err := db.Submit(func(tx *Txn) error { return tx.Put("a", []byte("k"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch()
	for i := range 3 {
		b.Put("b", fmt.Appendf(nil, "k%d", i), []byte("v"))
	}
	mustReturn(t, "a Write behind a Submit not yet waited for, the hand-off marking it held as the Write comes to wait", func() error { return db.Write(b) })
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-xdone; err != nil {
		t.Fatal(err)
	}
	if !once.Load() || !onceRead.Load() {
		t.Fatalf("the hooks did not run (hand-off %v, writer %v): the test tested nothing", once.Load(), onceRead.Load())
	}
}

// An Update's drain that found no held batch and goes to sleep must be
// woken when a hand-off marks one (an outside tester, 2026-12-07): the
// drain counted itself in drainers only after reading held, so a hand-off
// in between saw no drainer, and the Update (holding writeMu: every writer
// and Close behind it) waited for ever. It counts itself first now. The
// hook stalls the drain right before it sleeps.
func TestCommitQueue_DrainWokenByHeldMark(t *testing.T) {
	var slow atomic.Bool
	db, err := Open("/db", &Options{FS: slowSyncMem(&slow)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testHookDrainChecked = func() { time.Sleep(5 * time.Millisecond) }
	defer func() { testHookDrainChecked = nil }()
	slow.Store(true)
	for iter := range 8 {
		e, err := db.Submit(func(tx *Txn) error { return tx.Put("e", []byte("k"), fmt.Append(nil, iter)) })
		if err != nil {
			t.Fatal(err)
		}
		ydone := make(chan error, 1)
		go func() { ydone <- e.Wait() }()
		time.Sleep(500 * time.Microsecond)
		mustReturn(t, fmt.Sprintf("iter %d: Submit, Update, Wait", iter), func() error {
			c, err := db.Submit(func(tx *Txn) error { return tx.Put("a", []byte("k"), fmt.Append(nil, iter)) })
			if err != nil {
				return err
			}
			if err := db.Update(func(tx *Txn) error { return tx.Put("b", []byte("k"), fmt.Append(nil, iter)) }); err != nil {
				return err
			}
			return c.Wait()
		})
		if err := <-ydone; err != nil {
			t.Fatal(err)
		}
	}
}
