package pagefile

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
)

// TestFile_ReadOnlyScanMeetsANewerPage guards the free-list scan's check,
// on a ReadOnly open, that no page was written by a checkpoint after the
// meta it opened: a checkpoint of the writing process rewrites pages in
// place, so such a page means the open raced with it (ErrStale, and the
// root package opens again) or, when the store's State did not change
// (no checkpoint ran), that the newer checkpoint's meta is lost
// (ErrCorrupt, which a retry meets again); never a page to count as free
// or in use for the older meta. The store here is left as that race
// leaves it, and then quiet: the newer checkpoint's pages written, its
// meta slot not (damaged) and no db.redo to repair it.
func TestFile_ReadOnlyScanMeetsANewerPage(t *testing.T) {
	mem := newBase(t, crashTestOpts, 30)
	f, _ := mustOpen(t, mem, crashTestOpts)
	if err := workload(f, 1, 5, nil); err != nil {
		t.Fatal(err)
	}
	newer := f.Meta()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ps := int64(crashTestOpts.PageSize)
	if err := mem.Remove("/db/db.redo"); err != nil {
		t.Fatal(err)
	}
	if err := kdbtest.ZeroRange(mem, "/db/db.data", int64(metaSlotPage+newer.Seq%numMetaSlots)*ps, ps); err != nil {
		t.Fatal(err)
	}
	r, rep, err := Open("/db", Options{FS: mem, ReadOnly: true, ForceScan: true})
	if err == nil {
		defer r.Close()
		t.Fatalf("read-only scan of meta %d over pages of checkpoint %d: opened (%+v)", rep.MetaSeq, newer.Seq, rep)
	}
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "the meta slot of that checkpoint is lost") {
		t.Fatalf("Open: %v, want ErrCorrupt naming the lost meta (nothing changed: not ErrStale)", err)
	}
}

// TestFile_DataFileShorterThanThePageCount guards Open's check that
// db.data holds every page its meta counts: a file cut short (by a copy, a
// full disk, a bad tool) is ErrCorrupt at Open on a writable handle, not a
// store whose last pages fail only when first read, and whose writes would
// grow the file past a hole.
func TestFile_DataFileShorterThanThePageCount(t *testing.T) {
	mem := newBase(t, crashTestOpts, 30)
	size, _, err := mem.Stat("/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	if err := kdbtest.Truncate(mem, "/db/db.data", size-int64(crashTestOpts.PageSize)); err != nil {
		t.Fatal(err)
	}
	f, _, err := Open("/db", Options{FS: mem})
	if err == nil {
		f.Close()
		t.Fatal("Open accepted a db.data one page short of its page count")
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
}
