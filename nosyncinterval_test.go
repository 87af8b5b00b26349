package kdb_test

import (
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestNoSync_StreamSyncedWithinSyncInterval: NoSync commits are durable
// within SyncInterval even when they never stop coming: the timer armed
// by the first unsynced commit is not pushed back by the next ones (a
// commit every 5 ms with a 50 ms interval was never synced at all). The
// loop ends at the first fsync; a machine too slow to commit within the
// interval syncs anyway, so the test only fails when none comes.
func TestNoSync_StreamSyncedWithinSyncInterval(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), &kdb.Options{SyncInterval: 50 * time.Millisecond, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := db.Stats().JournalFsyncs
	start := time.Now()
	for i := 0; db.Stats().JournalFsyncs == before; i++ {
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("%v of NoSync commits every 5 ms with SyncInterval 50 ms: no fsync", el)
		}
		c, err := db.Submit(func(tx *kdb.Txn) error { tx.NoSync(); return tx.Put("t", []byte{byte(i)}, []byte("v")) })
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
