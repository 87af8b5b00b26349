package kdb_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_DamagedFreePageWhenTheFreeListIsRebuilt: a free page with
// damaged bytes made the store unopenable whenever its free list had to
// be rebuilt (db.free lost or not matching, ForceFreeListScan), while the
// trusted path opened it. Now the scan leaves a page it cannot read aside,
// recovery frees it when the index does not reach it (the next checkpoint
// stamps it free, repairing it), and refuses the store only when the index
// reaches it.
func TestOpen_DamagedFreePageWhenTheFreeListIsRebuilt(t *testing.T) {
	mem := vfs.NewMem()
	o := &kdb.Options{FS: mem}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	val := make([]byte, 300)
	for i := 0; i < 4000; i++ {
		if err := db.Put("t", key(i), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4000; i += 2 { // pages freed by the copy on write
		if err := db.Delete("t", key(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A free page and a page in use, from the page file itself.
	pf, _, err := pagefile.Open("/db", pagefile.Options{FS: mem, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	free := pf.FreeRanges()
	ps := int64(pf.PageSize())
	pc := pf.PageCount()
	_ = pf.Close()
	if len(free) == 0 {
		t.Fatal("no free page")
	}
	freePage := free[0].Start
	var inUse []pagefile.PageID
	for id := pagefile.FirstDataPage; id < pc; id++ {
		isFree := false
		for _, r := range free {
			isFree = isFree || (id >= r.Start && id < r.Start+pagefile.PageID(r.Len))
		}
		if !isFree {
			inUse = append(inUse, id)
		}
	}

	t.Run("free page", func(t *testing.T) {
		img := mem.Clone()
		if err := kdbtest.FlipBit(img, "/db/db.data", int64(freePage)*ps+ps/2, 4); err != nil {
			t.Fatal(err)
		}
		db, err := kdb.Open("/db", &kdb.Options{FS: img, ForceFreeListScan: true})
		if err != nil {
			t.Fatalf("Open with a damaged free page, free list rebuilt: %v", err)
		}
		if r := db.Recovery(); r.DamagedFreePages != 1 {
			t.Fatalf("DamagedFreePages %d, want 1", r.DamagedFreePages)
		}
		if _, err := db.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}
		for i := 1; i < 4000; i += 2 {
			if _, err := db.Get("t", key(i)); err != nil {
				t.Fatalf("Get %d: %v", i, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// The checkpoint stamped it free: a second rebuild reads it.
		db, err = kdb.Open("/db", &kdb.Options{FS: img, ForceFreeListScan: true})
		if err != nil {
			t.Fatal(err)
		}
		if r := db.Recovery(); r.DamagedFreePages != 0 {
			t.Fatalf("after the checkpoint: DamagedFreePages %d, want 0", r.DamagedFreePages)
		}
		_ = db.Close()
	})
	// Pages in use across the file, not only the first: the first ones
	// (the index's root page, the catalog) are read by every Open anyway,
	// so their damage is found without the free-list scan's check of what
	// the index reaches (until 2026-12-08 the test damaged only the first
	// page in use, and a recovery that freed a damaged leaf went unseen).
	t.Run("page in use", func(t *testing.T) {
		step := max(1, len(inUse)/24)
		for i := 0; i < len(inUse); i += step {
			page := inUse[i]
			img := mem.Clone()
			if err := kdbtest.FlipBit(img, "/db/db.data", int64(page)*ps+ps/2, 4); err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				db, err := kdb.Open("/db", &kdb.Options{FS: img, ForceFreeListScan: true, ReadOnly: ro})
				if err == nil {
					_ = db.Close()
				}
				if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), page.String()) {
					t.Fatalf("Open (ReadOnly=%v) with page %v in use damaged: %v, want ErrCorrupt naming it", ro, page, err)
				}
			}
		}
	})
}
