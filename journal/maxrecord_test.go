package journal

import (
	"bytes"
	"errors"
	"os"
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

// TestOpen_FlippedLengthSkipsOnlyItsBatch: with SkipDamaged, a frame whose
// length a flipped bit raised above the read bound is skipped alone: the
// search for the next frame starts right after its header, not where the
// damaged length says it ends (that skipped most of a segment of intact
// batches).
func TestOpen_FlippedLengthSkipsOnlyItsBatch(t *testing.T) {
	mem := vfs.NewMem()
	j, _ := openMem(t, mem, Options{SegmentSize: 32 << 20})
	var locs []Location
	for b := range 24 {
		l, err := j.Append(Record{Type: 1, Payload: payload(b, 0, 1<<20)})
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, l[0])
	}
	mustClose(t, j)
	// Bit 24 of record 3's length: 1 MiB becomes 17 MiB.
	name := testDir + "/" + locs[3].Segment.String()
	f, err := mem.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	at := locs[3].Offset + 16 + 3
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	j2, rep := openMem(t, mem, Options{SegmentSize: 32 << 20, SkipDamaged: true})
	defer mustClose(t, j2)
	if len(rep.Skipped) != 1 {
		t.Fatalf("skipped %v, want one range", rep.Skipped)
	}
	if got := len(collect(t, j2)); got != 23 {
		t.Fatalf("read %d records, want the 23 intact ones", got)
	}
}
