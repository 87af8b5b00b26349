package kdb_test

import (
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestSyncInterval_WritesDurableWithinTheInterval: under SyncInterval a
// Put returns before its fsync, and is on disk (it survives a power loss)
// within the interval, also after the store sat idle: the journal's
// syncer sleeps while nothing is written and must wake for the next
// write.
func TestSyncInterval_WritesDurableWithinTheInterval(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, Sync: kdb.SyncInterval, SyncInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, key := range []string{"first", "after an idle spell"} {
		if i > 0 {
			time.Sleep(30 * time.Millisecond)
		}
		before := db.Stats().JournalFsyncs
		if err := db.Put("i", []byte(key), []byte("v")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for db.Stats().JournalFsyncs == before {
			if time.Now().After(deadline) {
				t.Fatalf("%q: no journal fsync within 5 s of the Put (SyncInterval 2ms)", key)
			}
			time.Sleep(time.Millisecond)
		}
		img := mem.CrashClone(vfs.CrashOptions{})
		db2, err := kdb.Open("/db", &kdb.Options{FS: img})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db2.Get("i", []byte(key)); err != nil {
			t.Errorf("%q after the interval's fsync and a power loss: %v", key, err)
		}
		if err := db2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
