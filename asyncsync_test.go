package kdb_test

import (
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// Under SyncAlways a commit acknowledged without an fsync of its own (a
// NoSync transaction, AckAsync) is made durable within SyncInterval by a
// timer (commit.go, syncAsyncWithin), with no later write, Sync or
// Checkpoint to do it: a power cut some SyncIntervals later keeps it.
func TestDB_AsyncCommitSyncedWithinSyncInterval(t *testing.T) {
	mem := vfs.NewMem()
	const iv = 10 * time.Millisecond
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, Sync: kdb.SyncAlways, SyncInterval: iv, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	c, err := db.Submit(func(tx *kdb.Txn) error {
		tx.NoSync()
		return tx.Put("a", []byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	// A slow machine may run the timer late: look again until 2 s.
	deadline := time.Now().Add(2 * time.Second)
	for {
		time.Sleep(5 * iv)
		img := mem.CrashClone(vfs.CrashOptions{}) // unsynced bytes are lost
		after, err := kdb.Open("/db", &kdb.Options{FS: img})
		if err != nil {
			t.Fatal(err)
		}
		_, gerr := after.Get("a", []byte("k"))
		if err := after.Close(); err != nil {
			t.Fatal(err)
		}
		if gerr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a NoSync commit under SyncAlways, after a power cut 2 s later (SyncInterval %v): %v", iv, gerr)
		}
	}
}
