package kdb_test

import (
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// Whether a commit is synced is its host's: a deferred function that joined
// a Submit and called NoSync does not make the Submit's own commit unsynced
// (deferred.go, runFolded). Under SyncAlways the Submit's write, acknowledged
// by Wait, survives a power cut that drops every unsynced byte.
func TestDefer_FoldedNoSyncLeavesTheHostSynced(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, Sync: kdb.SyncAlways, SyncInterval: time.Hour, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	deferred := func(tx *kdb.Txn) error {
		tx.NoSync()
		return tx.Put("d", []byte("k"), []byte("v"))
	}
	if err := db.Defer(deferred, nil); err != nil {
		t.Fatal(err)
	}
	c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("h", []byte("host"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	img := mem.CrashClone(vfs.CrashOptions{}) // unsynced bytes are lost
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open("/db", &kdb.Options{FS: img})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Get("h", []byte("host")); err != nil {
		t.Fatalf("the Submit's acknowledged write after a power cut: %v (a joined deferred function's NoSync left it unsynced)", err)
	}
	if _, err := db.Get("d", []byte("k")); err != nil {
		t.Fatalf("the deferred write, in the host's batch: %v", err)
	}
}

// Under SyncAlways the timer that commits a deferred transaction no writer
// took (deferred.go, flushDeferredTimer) commits it synced: when its done
// is called with nil, its writes are durable. The image is taken inside
// done, before the AckAsync sync timer a second SyncInterval later could
// sync it anyway.
func TestDefer_TimerFlushIsSyncedUnderSyncAlways(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, Sync: kdb.SyncAlways, SyncInterval: 50 * time.Millisecond, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	type outcome struct {
		err error
		img *vfs.MemFS
	}
	answered := make(chan outcome, 1)
	put := func(tx *kdb.Txn) error { return tx.Put("d", []byte("k"), []byte("v")) }
	if err := db.Defer(put, func(err error) {
		answered <- outcome{err, mem.CrashClone(vfs.CrashOptions{})} // unsynced bytes are lost
	}); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer never committed the deferred transaction")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	after, err := kdb.Open("/db", &kdb.Options{FS: o.img})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, err := after.Get("d", []byte("k")); err != nil {
		t.Fatalf("the deferred write the timer committed, at a power cut when its done was called: %v", err)
	}
}
