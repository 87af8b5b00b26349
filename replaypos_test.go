package kdb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_JournalCutBeforeTheReplayPosition: the journal's last segment
// cut short below the checkpoint's replay position (an operator's
// truncate, a bad copy) is corruption, not a torn tail. Taking it for one
// opened the store and appended new records below the replay position,
// which the next crash's replay skipped: acknowledged writes lost
// without a word. Open refuses it, read-only too, and changes no file.
func TestOpen_JournalCutBeforeTheReplayPosition(t *testing.T) {
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
			var key [8]byte
			binary.BigEndian.PutUint64(key[:], uint64(i))
			if err := db.Put("t", key[:], bytes.Repeat([]byte{byte(i)}, 100+i%7*150)); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 300)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	write(300, 400)
	img := mem.Clone() // the process dies here
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := kdb.Open("/db", &kdb.Options{FS: img.Clone(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	from := ro.Recovery().ReplayFrom
	_ = ro.Close()
	at := bytes.IndexByte([]byte(from), '@')
	if at < 0 {
		t.Fatalf("replay position %q", from)
	}
	seg := from[:at]
	var off int64
	if _, err := fmt.Sscanf(from[at+1:], "%d", &off); err != nil || off < 2000 {
		t.Fatalf("replay position %q: want one well inside its segment", from)
	}
	if err := kdbtest.Truncate(img, path.Join("/db", seg), off-777); err != nil {
		t.Fatal(err)
	}
	files := func() map[string][]byte { return memFiles(t, img, "/db") }
	before := files()
	for _, readOnly := range []bool{false, true} {
		_, err := kdb.Open("/db", &kdb.Options{FS: img, ReadOnly: readOnly})
		if !errors.Is(err, kdb.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(seg)) {
			t.Fatalf("Open (ReadOnly=%v) of a journal cut below %s: %v, want ErrCorrupt naming %s", readOnly, from, err, seg)
		}
		after := files()
		if len(after) != len(before) {
			t.Fatalf("ReadOnly=%v: the failed Open changed the files: %d, was %d", readOnly, len(after), len(before))
		}
		for n, b := range before {
			if !bytes.Equal(after[n], b) {
				t.Fatalf("ReadOnly=%v: the failed Open changed %s", readOnly, n)
			}
		}
	}
}
