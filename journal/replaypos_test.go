package journal

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// Damage at or before the caller's replay position (Options.VerifyFrom)
// is never a torn tail: those bytes were durable before the position was
// recorded. Open refuses it with ErrCorrupt and changes nothing; with
// SkipDamaged it lists it and appends after the replay position, never
// below it (else a crash after the next writes would replay from a
// position the new records lie before, and lose them).
func segPath(id SegmentID) string { return testDir + "/" + id.String() }

func TestOpen_DamageBeforeTheReplayPositionIsCorrupt(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	// A replay position in the last segment, with records on both sides.
	last := bs[len(bs)-1].locs[0].Segment
	s := len(bs) - 1
	for s > 0 && bs[s-1].locs[0].Segment == last {
		s--
	}
	k := s + (len(bs)-s)/2
	if k-1 <= s || k+3 >= len(bs) || lastOf(bs[k]).Segment != last {
		t.Fatalf("test needs more batches in the last segment (%d to %d)", s, len(bs))
	}
	from := lastOf(bs[k])
	seg := segPath(last)
	snapshot := func(fsys vfs.FS) (int64, []byte) {
		b, err := vfs.ReadFile(fsys, seg)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(b)), b
	}
	cases := []struct {
		name   string
		damage func(fsys vfs.FS) error
	}{
		{"cut mid-record before it", func(fsys vfs.FS) error {
			return kdbtest.Truncate(fsys, seg, bs[k-1].locs[0].Offset+13)
		}},
		{"cut at a record before it", func(fsys vfs.FS) error {
			return kdbtest.Truncate(fsys, seg, bs[k-1].locs[0].Offset)
		}},
		{"cut inside its record", func(fsys vfs.FS) error {
			return kdbtest.Truncate(fsys, seg, from.Offset+5)
		}},
		{"zeroed before it", func(fsys vfs.FS) error {
			return kdbtest.ZeroRange(fsys, seg, bs[k-1].locs[0].Offset, from.Offset+24-bs[k-1].locs[0].Offset)
		}},
		{"emptied", func(fsys vfs.FS) error { return kdbtest.Truncate(fsys, seg, 0) }},
		{"header zeroed", func(fsys vfs.FS) error { return kdbtest.ZeroRange(fsys, seg, 0, segHeaderSize) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := fs.Clone()
			if err := c.damage(img); err != nil {
				t.Fatal(err)
			}
			size0, bytes0 := snapshot(img)
			var d delivered
			_, _, err := Open(testDir, Options{FS: img, VerifyFrom: from, Deliver: d.fn})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), seg[strings.LastIndex(seg, "/")+1:]) {
				t.Fatalf("Open: %v, want ErrCorrupt naming %s", err, seg)
			}
			if size, b := snapshot(img); size != size0 || string(b) != string(bytes0) {
				t.Fatalf("a failed Open changed %s: %d bytes, was %d", seg, size, size0)
			}
			// Read-only too: no warning-only report.
			if _, _, err := Open(testDir, Options{FS: img, VerifyFrom: from, Deliver: d.fn, ReadOnly: true}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read-only Open: %v, want ErrCorrupt", err)
			}
			if c.name == "emptied" || c.name == "header zeroed" {
				return
			}
			// SkipDamaged: the damage is listed, and new records go after
			// the replay position.
			j2, rep := openMem(t, img, Options{SkipDamaged: true, VerifyFrom: from})
			if len(rep.Skipped) == 0 {
				t.Fatalf("SkipDamaged: nothing listed: %+v", rep)
			}
			locs, err := j2.Append(Record{Type: 3, Payload: []byte("after")})
			if err != nil {
				t.Fatal(err)
			}
			if !from.Less(locs[0]) {
				t.Fatalf("with SkipDamaged a new record went to %v, at or before the replay position %v", locs[0], from)
			}
			mustClose(t, j2)
		})
	}
	// A cut after the replay position is still a torn tail.
	t.Run("torn after it", func(t *testing.T) {
		img := fs.Clone()
		if err := kdbtest.Truncate(img, seg, bs[len(bs)-1].locs[0].Offset+13); err != nil {
			t.Fatal(err)
		}
		var d delivered
		j2, rep, err := Open(testDir, Options{FS: img, VerifyFrom: from, Deliver: d.fn})
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, j2)
		if rep.TornAt != bs[len(bs)-1].locs[0] {
			t.Fatalf("TornAt %v, want %v", rep.TornAt, bs[len(bs)-1].locs[0])
		}
	})
}

// A segment file shorter than its header was cut by something other than
// kdb (creation preallocates and syncs a segment before naming it; a torn
// tail is cut after the header): ErrCorrupt, in the middle of the journal
// and at its end alike.
func TestOpen_SegmentShorterThanItsHeaderIsCorrupt(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	first, last := bs[0].locs[0].Segment, bs[len(bs)-1].locs[0].Segment
	if last < first+2 {
		t.Fatal("test needs three segments")
	}
	for _, id := range []SegmentID{first + 1, last} {
		for _, size := range []int64{0, 30} {
			img := fs.Clone()
			if err := kdbtest.Truncate(img, segPath(id), size); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(testDir, Options{FS: img})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), id.String()) {
				t.Fatalf("segment %v cut to %d bytes: Open: %v, want ErrCorrupt naming it", id, size, err)
			}
			// Before the replay position, where only the header is read.
			from := lastOf(bs[len(bs)-2])
			_, _, err = Open(testDir, Options{FS: img, VerifyFrom: from})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("segment %v cut to %d bytes, VerifyFrom %v: Open: %v, want ErrCorrupt", id, size, from, err)
			}
			if ok, _ := vfs.Exists(img, segPath(id)); !ok {
				t.Fatalf("a failed Open removed %v", id)
			}
		}
	}
}

// A frame of a reserved type the journal never writes (0xF0-0xFD), or a
// seal or close mark with a payload, is corruption even when its checksum
// verifies: FORMAT.md §4.4.
func TestOpen_ReservedRecordTypesAreCorrupt(t *testing.T) {
	for _, c := range []struct {
		typ     RecordType
		payload []byte
	}{{0xF5, nil}, {MinReservedType, nil}, {typeCloseMark, []byte("x")}, {typeSeal, []byte("payload")}} {
		fs, j, _ := build(t, Options{}, 20)
		// INVARIANT: no Append is pending, so no writer uses j.w.
		w := &j.w
		at := Location{w.seg.id, w.off}
		var sum uint64
		w.buf, sum = appendFrame(w.buf[:0], w.seg.seed, w.off, w.prev, uint32(w.synced), c.typ, flagBatchBegin|flagBatchEnd, c.payload)
		if err := j.writeBuf(w.off); err != nil {
			t.Fatal(err)
		}
		w.off += frameSize(len(c.payload))
		w.prev = sum
		// A batch after it, synced: the forged frame is not a torn tail.
		if _, err := j.Append(Record{Type: 3, Payload: []byte("after")}); err != nil {
			t.Fatal(err)
		}
		img := fs.Clone()
		mustClose(t, j)
		_, _, err := Open(testDir, Options{FS: img})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), at.String()) {
			t.Fatalf("type %#x with %d payload bytes at %v: Open: %v, want ErrCorrupt naming it", c.typ, len(c.payload), at, err)
		}
	}
}
