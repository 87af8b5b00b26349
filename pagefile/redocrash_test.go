package pagefile

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestFile_PowerLossRightAfterRedoApplied: a crash inside a checkpoint
// leaves a synced db.redo that db.data lacks; the next Open applies it and
// marks it applied. A power loss right after that Open (before anything
// else syncs) must still find the checkpoint whole: the applied images
// reach the disk before the mark can, so either the batch is applied again
// or db.data holds it. Every crash point of the workload whose image holds
// a pending db.redo is reopened, then power-lost under several seeds
// (sectors of each unsynced write kept or dropped at random).
func TestFile_PowerLossRightAfterRedoApplied(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	ref := runReference(t, base, crashRounds, 1)
	applied := 0
	for k := 1; k <= ref.total; k++ {
		c := kdbtest.CrashAt(base.Clone(), k, vfs.CrashOptions{})
		f, _, err := Open("/db", Options{FS: c.FS(), GrowBy: crashTestOpts.GrowBy})
		if err == nil {
			err = workload(f, crashRounds, 1, nil)
			_ = f.Close()
		}
		if !c.Crashed() {
			t.Fatalf("k=%d: no crash (%v)", k, err)
		}
		img := c.Image()
		// Which checkpoint this image holds (applying db.redo on a copy).
		want := checkRecovered(t, img.Clone(), ref, ref.allowed(k, false), fmt.Sprintf("crash at write %d", k))
		g, rep, err := Open("/db", Options{FS: img, GrowBy: crashTestOpts.GrowBy})
		if err != nil {
			t.Fatalf("k=%d: reopen: %v", k, err)
		}
		if !rep.RedoApplied {
			_ = g.Close()
			continue
		}
		applied++
		// The process dies here, holding g: nothing after Open ran.
		for seed := int64(1); seed <= 6; seed++ {
			lost := img.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: seed + int64(k)*100})
			checkRecovered(t, lost, ref, []int{want}, fmt.Sprintf("crash at write %d, db.redo applied, then a power loss (seed %d)", k, seed))
		}
		_ = g.Close()
	}
	if applied == 0 {
		t.Fatal("no crash point left a db.redo to apply: the test checks nothing")
	}
	t.Logf("crash points whose reopen applied db.redo: %d", applied)
}

// TestFile_PowerLossWhileANewRedoIsUnnamed: a store whose db.redo is gone
// (removed by hand, or never made) gets a new one at Open, whose directory
// entry is synced by the first checkpoint before it overwrites db.data in
// place. A power loss during that checkpoint's in-place writes must find
// the redo batch, or the older checkpoint whole: never db.data half
// rewritten with no db.redo to finish it. (Today the same checkpoint's
// db.free rename syncs the directory before the in-place writes too, so
// either sync alone keeps the name; the test fails if neither runs.)
func TestFile_PowerLossWhileANewRedoIsUnnamed(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	if err := base.Remove("/db/" + redoFileName); err != nil {
		t.Fatal(err)
	}
	if err := base.SyncDir("/db"); err != nil {
		t.Fatal(err)
	}
	ref := runReference(t, base, 2, 1)
	for seed := int64(1); seed <= 4; seed++ {
		crashLoop(t, base, ref, 2, 1, vfs.CrashOptions{KeepUnsynced: 0.5, Seed: seed})
	}
}
