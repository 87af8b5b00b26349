package kdb_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestRead_CutSealedSegmentIsCorrupt: a sealed journal segment (before the
// replay position) cut short inside a record holding a value the index
// refers to. Open succeeds (such segments are verified when read); Get and
// Check then say kdb.ErrCorrupt naming the segment and offset, and Check
// lists the values it cannot read. The short read used to be a bare
// "unexpected EOF", an I/O error to every caller (an outside tester's
// finding).
func TestRead_CutSealedSegmentIsCorrupt(t *testing.T) {
	mem := vfs.NewMem()
	opts := func() *kdb.Options {
		return &kdb.Options{FS: mem, SegmentSize: 64 << 10, CheckpointInterval: -1}
	}
	db, err := kdb.Open("/db", opts())
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 2000) // above ValueThreshold: kept in the journal
	for i := range val {
		val[i] = byte(i)
	}
	for i := 0; i < 80; i++ { // ~160 KiB: three segments
		if err := db.Put("x", []byte(fmt.Sprintf("k%03d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// k000's value is the first record of db-1.log after the mark of the
	// store's first checkpoint (offset 64, 32 bytes): at offset 96. Cut the
	// sealed segment inside that record's 32-byte header.
	if err := kdbtest.Truncate(mem, "/db/db-1.log", 96+20); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open("/db", opts())
	if err != nil {
		t.Logf("open refused (acceptable if ErrCorrupt): %v corrupt=%v", err, errors.Is(err, kdb.ErrCorrupt))
		if !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatal("open error is not ErrCorrupt")
		}
		return
	}
	defer db.Close()
	_, gerr := db.Get("x", []byte("k000"))
	t.Logf("Get: %v", gerr)
	_, cerr := db.Check()
	t.Logf("Check: %v", cerr)
	if gerr == nil {
		t.Fatal("Get of a value in a cut segment returned no error")
	}
	if !errors.Is(gerr, kdb.ErrCorrupt) || !strings.Contains(gerr.Error(), "db-1.log@96") {
		t.Errorf("Get: %v, want kdb.ErrCorrupt naming db-1.log@96", gerr)
	}
	if !errors.Is(cerr, kdb.ErrCorrupt) || !strings.Contains(cerr.Error(), `key "k000" (db-1.log@96)`) {
		t.Errorf("Check: %v, want kdb.ErrCorrupt listing k000's value", cerr)
	}
}
