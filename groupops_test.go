package kdb_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestCommitGroupOps_BoundsAGroup: a commit leader gathers no more
// operations into one group than Options.CommitGroupOps (a batch larger
// than that still goes alone). At 1, 16 writers of one-op batches are
// committed one batch a group (Commits == Batches); without the bound
// the leaders gathered many.
func TestCommitGroupOps_BoundsAGroup(t *testing.T) {
	// A sync that takes a millisecond: the writers queue behind it, so a
	// leader always finds more than one batch to gather.
	slow := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync && strings.Contains(e.Path, "db-") {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	db, err := kdb.Open("/db", &kdb.Options{FS: slow, CommitGroupOps: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s0 := db.Stats()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if err := db.Put("t", fmt.Appendf(nil, "w%02d-%03d", w, i), []byte("v")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s1 := db.Stats()
	if c, b := s1.Commits-s0.Commits, s1.Batches-s0.Batches; c != b || b < 320 {
		t.Fatalf("CommitGroupOps 1: %d batches in %d groups, want one a group", b, c)
	}
}
