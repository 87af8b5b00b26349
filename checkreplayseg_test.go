package kdb_test

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestCheck_VerifiesTheReplaySegmentBeforeThePosition: an open verifies the
// journal only from the checkpoint's replay position on, and that position
// usually lies inside a segment. Check must still verify the records before
// it in that segment: damage there is reported, not passed over.
func TestCheck_VerifiesTheReplaySegmentBeforeThePosition(t *testing.T) {
	mem := vfs.NewMem()
	o := &kdb.Options{FS: mem, CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := db.Put("t", fmt.Appendf(nil, "k%04d", i), []byte("small")); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 40)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	write(40, 50)
	img := mem.Clone() // the process dies here
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	locs := journalLocations(t, img.Clone(), "/db")
	victim := locs[10] // a put well before the replay position
	if locs[len(locs)-1].Segment != victim.Segment {
		t.Fatalf("test needs one segment: %v .. %v", victim, locs[len(locs)-1])
	}

	check := func(fs vfs.FS) error {
		t.Helper()
		db, err := kdb.Open("/db", &kdb.Options{FS: fs, NoCheckpointOnClose: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer db.Close()
		_, err = db.Check()
		return err
	}
	if err := check(img.Clone()); err != nil {
		t.Fatalf("Check of the intact store: %v", err)
	}
	if err := kdbtest.FlipBit(img, path.Join("/db", victim.Segment.String()), victim.Offset+30, 2); err != nil {
		t.Fatal(err)
	}
	err = check(img)
	if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), victim.Segment.String()) {
		t.Fatalf("Check with a damaged record before the replay position: %v, want ErrCorrupt naming %v", err, victim.Segment)
	}
}
