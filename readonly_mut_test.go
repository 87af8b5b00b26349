package kdb_test

import (
	"errors"
	"fmt"
	"path"
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
