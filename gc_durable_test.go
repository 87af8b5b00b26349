package kdb

import (
	"bytes"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// Journal GC judges which segments are dead from the state applied, which
// can be ahead of what the journal holds durably: compaction's moves (and
// AckAsync, NoSync transactions) are applied without an fsync of their own.
// Before it removes a segment GC makes that state durable; otherwise a
// power loss that dropped the moves would leave the index pointing into
// the segments it removed, and the store would not open.
func TestGC_RemovesOnlyWhatTheDurableStateNoLongerNeeds(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := func(fs vfs.FS) *Options {
		return &Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1,
			CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20}
	}
	db, err := Open("/db", opts(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := bytes.Repeat([]byte("o"), 1024)
	if err := db.Put("a", []byte("once"), old); err != nil {
		t.Fatal(err)
	}
	hot := make([]byte, 4096)
	for i := range 300 {
		hot[0], hot[1] = byte(i), byte(i>>8)
		if err := db.Put("b", []byte("hot"), hot); err != nil {
			t.Fatal(err)
		}
	}
	// A checkpoint without the compaction pass that follows one: "once"
	// pins the journal's first segment.
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	first := db.j.Segments()[0].ID
	loc, _ := indexRef(t, db, "a", "once")
	if loc.Segment != first {
		t.Fatalf("once is in %s, the journal begins at %s", loc.Segment, first)
	}
	// The pass moves "once" forward, journaled and applied, not synced;
	// GC for the last checkpoint then finds the first segment dead.
	db.compaction.mu.Lock()
	n, err := db.compact()
	db.compaction.mu.Unlock()
	if err != nil || n == 0 {
		t.Fatalf("compaction moved %d values: %v", n, err)
	}
	if err := db.gcAgain(); err != nil {
		t.Fatal(err)
	}
	if db.j.Segments()[0].ID == first {
		t.Fatalf("GC kept %s: the test needs it removed", first)
	}
	for _, keep := range []float64{0, 0.5, 1} {
		img := fs.CrashClone(vfs.CrashOptions{KeepUnsynced: keep})
		db2, err := Open("/db", opts(img))
		if err != nil {
			t.Fatalf("power loss (keep %.1f of the unsynced bytes) after GC removed %s: %v", keep, first, err)
		}
		if v, err := db2.Get("a", []byte("once")); err != nil || !bytes.Equal(v, old) {
			t.Fatalf("once after the power loss: %d bytes, %v", len(v), err)
		}
		if _, err := db2.Check(); err != nil {
			t.Fatal(err)
		}
		if err := db2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
