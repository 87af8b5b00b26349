package journal

import (
	"bytes"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// Under SyncAlways a record is readable as soon as Write returned, before
// any fdatasync (a caller applies an unsynced commit, then reads it), while
// Iterate and Tail still stop at what is durable.
func TestRead_WrittenBeforeSync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	j, _, err := Open("/j", Options{FS: fs, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	payload := bytes.Repeat([]byte("p"), 700)
	locs, end, err := j.Write(Record{Type: 1, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := j.Read(locs[0])
	if err != nil || !bytes.Equal(rec.Payload, payload) {
		t.Fatalf("read before sync: %d bytes, %v", len(rec.Payload), err)
	}
	if tail := j.Tail(); !tail.Less(end) {
		t.Fatalf("tail %s before the sync, want before %s", tail, end)
	}
	n := 0
	if err := j.Iterate(Location{}, func(Location, Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("Iterate saw %d unsynced records", n)
	}
	// Past what was written: still not found.
	if _, err := j.Read(end); err == nil {
		t.Fatal("read past the written records")
	}
	if err := j.SyncTo(end); err != nil {
		t.Fatal(err)
	}
	if tail := j.Tail(); tail != end {
		t.Fatalf("tail %s after the sync, want %s", tail, end)
	}
}
