package kdb_test

import (
	"errors"
	"fmt"
	"path"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestReadOnly_DamageInAnUnchangedStoreIsCorrupt guards staleOr's rule that
// a ReadOnly handle reports ErrStale only if the store changed since Open
// (pagefile.File.Changed): damage found in a store nothing writes is
// ErrCorrupt, as for a writable handle, not an invitation to reopen and
// retry. TestReadOnly_ViewAfterLiveCheckpointsIsStaleNotCorrupt covers only
// the changed store.
func TestReadOnly_DamageInAnUnchangedStoreIsCorrupt(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := db.Put("t", fmt.Appendf(nil, "k%04d", i), []byte("small")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil { // checkpoints: Open verifies from the end on
		t.Fatal(err)
	}
	locs := journalLocations(t, mem.Clone(), "/db")
	victim := locs[5] // well before the replay position: Open does not read it
	if err := kdbtest.FlipBit(mem, path.Join("/db", victim.Segment.String()), victim.Offset+30, 2); err != nil {
		t.Fatal(err)
	}
	ro, err := kdb.Open("/db", &kdb.Options{FS: mem, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	defer ro.Close()
	_, err = ro.Check()
	if !errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, kdb.ErrStale) {
		t.Fatalf("Check of a damaged, unchanged store through a read-only handle: %v; want ErrCorrupt, not ErrStale", err)
	}
}

// TestReadOnly_OpenRetriesWhenTheDirectoryChanged guards openReadOnly's
// retry of an open that failed while the store changed under it: the
// first attempt fails (here an injected error opening a journal segment)
// while the directory's names change, as journal GC's removals do just
// after a checkpoint's meta is written (the State alone does not show
// them; here a file appears). The
// open must retry and succeed. Each of the rule's parts could be dropped
// with every test passing: the comparison of the directory's names, the
// comparison itself (every failure reported at once) and the retries.
func TestReadOnly_OpenRetriesWhenTheDirectoryChanged(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := db.Put("t", fmt.Appendf(nil, "k%04d", i), []byte("small")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The open's first opening of a journal segment fails.
	var failed atomic.Bool
	fsys := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpOpen && path.Ext(e.Path) == ".log" && failed.CompareAndSwap(false, true) {
			// What changes the directory while the open runs: a new name
			// in it, nothing else.
			if err := vfs.WriteFileAtomic(mem, "/db/unrelated", []byte("x"), 0o600); err != nil {
				return err
			}
			return syscall.EIO
		}
		return nil
	})
	ro, err := kdb.Open("/db", &kdb.Options{FS: fsys, ReadOnly: true})
	if !failed.Load() {
		t.Fatal("no journal segment opened")
	}
	if err != nil {
		t.Fatalf("read-only open whose first attempt failed while the directory changed: %v", err)
	}
	defer ro.Close()
	if v, err := ro.Get("t", []byte("k0007")); err != nil || string(v) != "small" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}
