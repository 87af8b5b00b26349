package pagefile

import (
	"errors"
	"fmt"
	"strings"
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
		img := crashImage(t, kdbtest.CrashAt(base.Clone(), k, vfs.CrashOptions{}), k)
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

// crashImage runs the crash tests' workload on c, which crashes it at
// mutating operation k, and returns the image the crash left.
func crashImage(t *testing.T, c *kdbtest.Crasher, k int) *vfs.MemFS {
	t.Helper()
	f, _, err := Open("/db", Options{FS: c.FS(), GrowBy: crashTestOpts.GrowBy})
	if err == nil {
		err = workload(f, crashRounds, 1, nil)
		_ = f.Close()
	}
	if !c.Crashed() {
		t.Fatalf("k=%d: no crash (%v)", k, err)
	}
	return c.Image()
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

// TestFile_DamagedRedoAfterInPlaceWrites: a crash inside a checkpoint's
// in-place writes leaves db.data holding part of the new checkpoint and a
// complete db.redo to finish it. If db.redo is then damaged (its magic
// flipped, a byte of an image flipped, cut to nothing, removed), it reads
// as incomplete, like one a crash tore while it was written; an outside
// tester found Open then opened the older meta over the newer pages, a mix
// of two checkpoints. Every crash point whose image needs its db.redo is
// damaged each way, after a process crash and after power losses: Open
// must give ErrCorrupt or a whole checkpoint the crash allows, and at least
// one of them must be ErrCorrupt (a damaged db.redo over pages rewritten
// in place). A power loss that kept a checkpoint's meta slot and dropped
// pages it wrote before it (one sync covered both) left a state only
// db.redo could repair, and damaged, the store opened at the new meta over
// older pages (an outside tester's finding, at the level of the store).
func TestFile_DamagedRedoAfterInPlaceWrites(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	ref := runReference(t, base, crashRounds, 1)
	damages := []struct {
		name string
		fn   func(fsys *vfs.MemFS) error
	}{
		{"magic flipped", func(fsys *vfs.MemFS) error { return kdbtest.FlipBit(fsys, "/db/"+redoFileName, redoMagicOff, 0) }},
		{"an image flipped", func(fsys *vfs.MemFS) error {
			size, _, err := fsys.Stat("/db/" + redoFileName)
			if err != nil {
				return err
			}
			return kdbtest.FlipBit(fsys, "/db/"+redoFileName, size-redoTrailerSize-10, 3)
		}},
		{"cut to nothing", func(fsys *vfs.MemFS) error { return kdbtest.Truncate(fsys, "/db/"+redoFileName, 0) }},
		{"removed", func(fsys *vfs.MemFS) error { return fsys.Remove("/db/" + redoFileName) }},
	}
	// A process crash keeps every write; a power loss keeps some of the
	// unsynced ones (and a checkpoint's in-place writes used to share one
	// sync with its meta slot, so the meta could survive over older pages).
	crashes := []struct {
		name string
		at   func(mem *vfs.MemFS, k int) *kdbtest.Crasher
	}{{"process crash", kdbtest.ProcessCrashAt}}
	for seed := int64(1); seed <= 6; seed++ {
		crashes = append(crashes, struct {
			name string
			at   func(mem *vfs.MemFS, k int) *kdbtest.Crasher
		}{fmt.Sprintf("power loss (seed %d)", seed), func(mem *vfs.MemFS, k int) *kdbtest.Crasher {
			return kdbtest.CrashAt(mem, k, vfs.CrashOptions{KeepUnsynced: 0.5, Seed: seed + int64(k)*100})
		}})
	}
	needed, refused := 0, 0
	for _, crash := range crashes {
		for k := 1; k <= ref.total; k++ {
			img := crashImage(t, crash.at(base.Clone(), k), k)
			g, rep, err := Open("/db", Options{FS: img.Clone(), GrowBy: crashTestOpts.GrowBy})
			if err != nil {
				t.Fatalf("k=%d: reopen: %v", k, err)
			}
			_ = g.Close()
			if !rep.RedoApplied {
				continue
			}
			needed++
			for _, d := range damages {
				fsys := img.Clone()
				if err := d.fn(fsys); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("%s at write %d, db.redo %s", crash.name, k, d.name)
				h, _, err := Open("/db", Options{FS: fsys, GrowBy: crashTestOpts.GrowBy})
				if err != nil {
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "written by checkpoint") {
						t.Fatalf("%s: Open: %v, want ErrCorrupt naming the page of the newer checkpoint", what, err)
					}
					refused++
					continue
				}
				got := captureState(t, h)
				_ = h.Close()
				ok := false
				for _, i := range ref.allowed(k, true) {
					ok = ok || equalState(got, ref.states[i], false) == ""
				}
				if !ok {
					t.Fatalf("%s: opened %v, a state no crash there allows (%v)", what, got, ref.allowed(k, true))
				}
			}
		}
	}
	t.Logf("crash images needing db.redo: %d; damaged opens refused: %d of %d", needed, refused, needed*len(damages))
	if needed == 0 || refused == 0 {
		t.Fatal("no crash point left pages rewritten in place beside a db.redo to damage: the test checks nothing")
	}
}
