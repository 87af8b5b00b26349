package kdb

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_GCRemovedSegmentsNameTheJournalsEnd: the checkpointed index
// refers to a value in db-1.log; the value is overwritten after the
// checkpoint, and journal GC removes db-1.log to db-3.log (by design: the
// replay of the overwrite drops the reference again). The newest segment
// then loses the overwrite's batch (cut at its start). Open must refuse
// (the index names a value in a removed segment), and its ErrCorrupt must
// point at the journal's end too, not only at the segments GC rightly
// removed: it called them "missing" and named neither the replay
// position's segment nor a cut (an outside tester, 2026-12-07).
func TestOpen_GCRemovedSegmentsNameTheJournalsEnd(t *testing.T) {
	mem := vfs.NewMem()
	opts := func(fs vfs.FS) *Options {
		return &Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1,
			CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true}
	}
	db, err := Open("/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("x", []byte("cold"), bytes.Repeat([]byte("c"), 2000)); err != nil {
		t.Fatal(err)
	}
	hot := make([]byte, 4000)
	for i := range 60 { // ~240 KiB: segments 1-4
		hot[0] = byte(i)
		if err := db.Put("x", fmt.Appendf(nil, "hot%d", i%4), hot); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.checkpoint(); err != nil { // its index: "cold" in db-1.log
		t.Fatal(err)
	}
	replay := db.mu.ckApplied
	if err := db.Put("x", []byte("cold"), bytes.Repeat([]byte("C"), 2000)); err != nil {
		t.Fatal(err)
	}
	var ref []byte
	if err := db.View(func(s *Snapshot) error {
		t, err := s.openIndex("x")
		if err != nil {
			return err
		}
		ref, _, err = t.get([]byte("cold"))
		ref = bytes.Clone(ref)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seg, _, _ := decodeRefHeader(ref)
	off := int64(ref[5]) | int64(ref[6])<<8 | int64(ref[7])<<16 // the overwrite's frame
	for i := range 3 {
		if err := db.Put("x", fmt.Appendf(nil, "after%d", i), []byte("small")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.gcAgain(); err != nil {
		t.Fatal(err)
	}
	if segs := db.j.Segments(); len(segs) != 1 || segs[0].ID != replay.Segment || uint64(seg) != uint64(replay.Segment) {
		t.Fatalf("setup: segments %v, replay position %v, overwrite in db-%d.log: want only the replay position's segment left, holding the overwrite", segs, replay, seg)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	last := replay.Segment.String()
	img := mem.Clone()
	if err := kdbtest.Truncate(img, "/db/"+last, off); err != nil {
		t.Fatal(err)
	}
	_, err = Open("/db", opts(img))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with the overwrite cut from %s: %v, want ErrCorrupt", last, err)
	}
	for _, want := range []string{"db-1.log", "journal GC", replay.String(), "from " + last + " on, cut short or removed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open's error does not name %q: %v", want, err)
		}
	}
}
