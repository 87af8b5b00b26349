package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// Damage in journal records before the replay position (which an open does
// not read) does not stop Check at the damage: it goes on through the
// index and names the keys whose values kept in the journal cannot be
// read, and counts them, so that an operator learns what was lost, not
// only where. (Check stopped at the journal's first error and named no
// key.)
func TestCheck_NamesTheKeysOfUnreadableJournalValues(t *testing.T) {
	mem := vfs.NewMem()
	o := &kdb.Options{FS: mem, CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	val := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "<value %04d>", i), 80) } // kept in the journal
	for i := range 30 {
		if err := db.Put("t", fmt.Appendf(nil, "big%04d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	img := mem.Clone()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The records holding the values of big0007 and big0012.
	victims := map[int]journal.Location{}
	j, _, err := journal.Open("/db", journal.Options{FS: img.Clone(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Iterate(journal.Location{}, func(loc journal.Location, r journal.Record) error {
		for _, i := range []int{7, 12} {
			if bytes.Contains(r.Payload, val(i)) {
				victims[i] = loc
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	if len(victims) != 2 {
		t.Fatalf("found the records of %d values, want 2", len(victims))
	}

	check := func(fs vfs.FS) (*kdb.CheckReport, error) {
		t.Helper()
		db, err := kdb.Open("/db", &kdb.Options{FS: fs, NoCheckpointOnClose: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer db.Close()
		return db.Check()
	}
	rep, err := check(img.Clone())
	if err != nil || rep.JournalValues != 30 || rep.UnreadableValues != 0 {
		t.Fatalf("Check of the intact store: %+v, %v; want 30 journal values verified", rep, err)
	}
	for _, loc := range victims {
		if err := kdbtest.FlipBit(img, path.Join("/db", loc.Segment.String()), loc.Offset+40, 3); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = check(img)
	if !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Check with two damaged values: %v, want ErrCorrupt", err)
	}
	msg := err.Error()
	for _, want := range []string{victims[7].Segment.String(), `key "big0007"`, `key "big0012"`, "2 values kept in the journal cannot be read"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check's error does not say %s: %v", want, msg)
		}
	}
	if strings.Contains(msg, `key "big0008"`) {
		t.Errorf("Check's error names an intact key: %v", msg)
	}
	if rep == nil || rep.UnreadableValues != 2 || rep.JournalValues != 28 {
		t.Fatalf("report %+v; want 2 unreadable values, 28 verified", rep)
	}
}
