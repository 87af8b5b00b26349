package journal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_RecordsAboveTheReopenersMaxRecordSize: a journal written with
// a larger MaxRecordSize (and larger segments) than the one it is reopened
// with after a crash. Its records are synced and acknowledged: every one
// must be read back, never taken for a torn tail (a length above the
// opener's bound was treated as damage, and damage in the unsynced tail of
// the last segment as torn, so Open truncated acknowledged records).
func TestOpen_RecordsAboveTheReopenersMaxRecordSize(t *testing.T) {
	mem := vfs.NewMem()
	j, _ := openMem(t, mem, Options{SegmentSize: 4 << 20, MaxRecordSize: 1 << 20})
	var want [][]byte
	for b := range 3 {
		p := payload(b, 0, 300<<10)
		if _, err := j.Append(Record{Type: 1, Payload: p}); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	img := mem.CrashClone(vfs.CrashOptions{})
	mustClose(t, j)

	// The default MaxRecordSize for 64 KiB segments is below 64 KiB.
	j2, rep := openMem(t, img, Options{SegmentSize: 64 << 10})
	defer mustClose(t, j2)
	if rep.TornBytesTruncated != 0 {
		t.Fatalf("truncated %d bytes at %v of acknowledged records", rep.TornBytesTruncated, rep.TornAt)
	}
	got := collect(t, j2)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, e := range got {
		if !bytes.Equal(e.rec.Payload, want[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
}

// TestOpen_RecordAboveEveryBoundIsCorrupt: a frame whose length exceeds
// what the opener may read (MaxRecordSize, and at least 16 MiB) but fits
// in its segment is never a torn tail: a crash tears a frame this writer
// wrote, within its bound. Open fails with ErrCorrupt saying what to do,
// and truncates nothing.
func TestOpen_RecordAboveEveryBoundIsCorrupt(t *testing.T) {
	mem := vfs.NewMem()
	j, _ := openMem(t, mem, Options{SegmentSize: 18 << 20, MaxRecordSize: 17<<20 + 4096})
	if _, err := j.Append(Record{Type: 1, Payload: payload(0, 0, 17<<20)}); err != nil {
		t.Fatal(err)
	}
	img := mem.CrashClone(vfs.CrashOptions{})
	mustClose(t, j)
	_, _, err := Open(testDir, Options{FS: img, SegmentSize: 18 << 20})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
	t.Log(err)
	// Reopened with the bound it was written with, it reads.
	j2, rep := openMem(t, img, Options{SegmentSize: 18 << 20, MaxRecordSize: 17<<20 + 4096})
	defer mustClose(t, j2)
	if rep.TornBytesTruncated != 0 || len(collect(t, j2)) != 1 {
		t.Fatalf("after the refused open: truncated %d, want the record", rep.TornBytesTruncated)
	}
}
