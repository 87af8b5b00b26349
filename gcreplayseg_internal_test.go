package kdb

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// Journal GC after a checkpoint removes only the segments wholly before its
// replay position, never the one that position lies in, even once the
// journal has moved on to later segments (writes between the checkpoint's
// flush and its GC, or gcAgain's later run for a View that held segments).
// Here GC runs again for the checkpoint after the writes that followed it
// rotated the journal: a reopen must replay them from the checkpoint's
// segment.
func TestGC_KeepsTheReplaySegment(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true}
	db, err := Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int) {
		t.Helper()
		if err := db.Put("t", fmt.Appendf(nil, "k%05d", i), []byte("a small value, kept in the index")); err != nil {
			t.Fatal(err)
		}
	}
	last := func() uint64 {
		segs := db.j.Segments()
		return uint64(segs[len(segs)-1].ID)
	}
	i := 0
	for ; last() < 3; i++ {
		put(i)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	applied := db.mu.ckApplied
	db.mu.Unlock()
	for ; last() < uint64(applied.Segment)+2; i++ {
		put(i)
	}
	if err := db.gcAgain(); err != nil {
		t.Fatal(err)
	}
	for _, s := range db.j.Segments() {
		if s.ID == applied.Segment {
			break
		}
		if s.ID > applied.Segment {
			t.Fatalf("GC removed segment %d, which the checkpoint's replay position %s lies in", applied.Segment, applied)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("/db", &Options{FS: mem, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatalf("reopen after GC: %v", err)
	}
	defer db.Close()
	for k := range i {
		if _, err := db.Get("t", fmt.Appendf(nil, "k%05d", k)); err != nil {
			t.Fatalf("k%05d (of %d) after GC and reopen: %v", k, i, err)
		}
	}
}
