package kdb_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// With an fsync that takes time, concurrent writers share it: the
// commit leader lingers for the writers of the last group instead of letting
// them form a second cohort that alternates with the first (which gives
// each fsync half the writers: 0.125 fsyncs per put with 16).
func TestDB_GroupCommitGathersAllWriters(t *testing.T) {
	slow := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync {
			time.Sleep(3 * time.Millisecond)
		}
		return nil
	})
	db, err := kdb.Open("/db", &kdb.Options{FS: slow, CheckpointInterval: -1,
		CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const writers, puts = 16, 40
	before := db.Stats().JournalFsyncs
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range puts {
				if err := db.Put("g", fmt.Appendf(nil, "w%02d-%03d", w, i), []byte("v")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	perPut := float64(db.Stats().JournalFsyncs-before) / (writers * puts)
	t.Logf("%.3f fsyncs per put with %d writers", perPut, writers)
	if perPut > 0.1 {
		t.Fatalf("%.3f fsyncs per put with %d writers: groups hold %.1f writers", perPut, writers, 1/perPut)
	}
}
