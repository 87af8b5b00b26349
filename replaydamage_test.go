package kdb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_DamageAfterReplayedRecordsChangesNothing: recovery applies the
// records after the checkpoint while the journal's open is still verifying
// (journal.Options.Deliver). When that open then finds damage further on,
// Open fails, and nothing of what was already applied reaches the disk: every
// file is as the crash left it, and a read-only open fails the same way.
func TestOpen_DamageAfterReplayedRecordsChangesNothing(t *testing.T) {
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
			b := kdb.NewBatch()
			for k := 0; k < 8; k++ {
				var key [8]byte
				binary.BigEndian.PutUint64(key[:], uint64(i*8+k))
				b.Put("t", key[:], bytes.Repeat([]byte{byte(i)}, 100+k*200)) // some inline, some in the journal
			}
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 20)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	write(20, 1400)    // over 8,000 records: replay commits chunks before it reaches the damage
	img := mem.Clone() // the process dies here
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The records the reopen replays: those after the checkpoint's replay
	// position, the last record of batch 19.
	locs := journalLocations(t, img.Clone(), "/db")
	// A record three quarters of the way in: the batches before it are
	// replayed before the open reaches it, and the batches after it prove
	// it was durable, so the damage is corruption, not a torn tail.
	victim := locs[len(locs)*3/4]
	if err := kdbtest.FlipBit(img, path.Join("/db", victim.Segment.String()), victim.Offset+1, 2); err != nil {
		t.Fatal(err)
	}
	files := func() map[string][]byte { return memFiles(t, img, "/db") }
	before := files()

	for _, ro := range []bool{false, true} {
		_, err := kdb.Open("/db", &kdb.Options{FS: img, ReadOnly: ro})
		if !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatalf("Open (ReadOnly=%v): %v, want ErrCorrupt", ro, err)
		}
		after := files()
		for n, b := range before {
			if !bytes.Equal(after[n], b) {
				t.Fatalf("ReadOnly=%v: the failed Open changed %s", ro, n)
			}
		}
		for n := range after {
			if _, ok := before[n]; !ok {
				t.Fatalf("ReadOnly=%v: the failed Open created %s", ro, n)
			}
		}
	}
}

// memFiles returns the bytes of every file in dir, by name.
func memFiles(t *testing.T, fsys vfs.FS, dir string) map[string][]byte {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string][]byte)
	for _, n := range names {
		b, err := vfs.ReadFile(fsys, path.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		m[n] = b
	}
	return m
}

// journalLocations returns the location of every user record of the
// journal in dir, read through a read-only open of fs.
func journalLocations(t *testing.T, fs vfs.FS, dir string) []journal.Location {
	t.Helper()
	j, _, err := journal.Open(dir, journal.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var locs []journal.Location
	if err := j.Iterate(journal.Location{}, func(loc journal.Location, _ journal.Record) error {
		locs = append(locs, loc)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return locs
}
