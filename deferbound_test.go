package kdb_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestDefer_QueueIsBounded: a loop of Defers with no other write (a
// consumer acking a backlog with the broker's AckAsync) used to queue
// without bound, the timer's flushes never catching up: 1.7 million
// deferred transactions and 818 MiB of heap in 3 s, and the Sync after
// them took 20 s. Now the Defer that fills the queue commits it, so at
// any time at most the queue's bound (1,024) are deferred and not done,
// with no timer to help (SyncInterval of an hour here); and each is
// applied, and durable after Sync, once.
func TestDefer_QueueIsBounded(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var c doneCounter
	const n = 20000
	maxWaiting := int64(0)
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("a", k, k) }, c.done); err != nil {
			t.Fatalf("Defer %d: %v", i, err)
		}
		maxWaiting = max(maxWaiting, int64(i+1)-c.ok.Load()-c.failed.Load())
	}
	if maxWaiting > 1024 {
		t.Errorf("%d Defers in a loop left up to %d of them queued: the queue is not bounded (want at most 1024)", n, maxWaiting)
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if ok, failed := c.ok.Load(), c.failed.Load(); ok != n || failed != 0 {
		t.Errorf("after Sync: %d done with nil, %d failed; want %d and 0", ok, failed, n)
	}
	// Durable: a power cut after Sync keeps every one.
	img := mem.CrashClone(vfs.CrashOptions{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := kdb.Open("/db", &kdb.Options{FS: img})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	got := 0
	if err := db2.View(func(s *kdb.Snapshot) error {
		it := s.Iter("a")
		for ok := it.First(); ok; ok = it.Next() {
			got++
		}
		return it.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("after a power cut: %d keys, want %d", got, n)
	}
}
