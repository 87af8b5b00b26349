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
