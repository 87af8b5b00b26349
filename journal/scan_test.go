package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// batch is one acknowledged Append.
type batch struct {
	locs []Location
	recs []Record
}

// build appends n batches of 1-3 records to a fresh journal on a MemFS and
// returns the FS, the journal (still open) and the batches.
func build(t *testing.T, o Options, n int) (*vfs.MemFS, *Journal, []batch) {
	t.Helper()
	fs := vfs.NewMem()
	j, _ := openMem(t, fs, o)
	var bs []batch
	for b := 0; b < n; b++ {
		recs := make([]Record, b%3+1)
		for i := range recs {
			recs[i] = Record{Type: RecordType(i + 1), Payload: payload(b, i, 200+b%5*50)}
		}
		locs, err := j.Append(recs...)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		bs = append(bs, batch{locs, recs})
	}
	return fs, j, bs
}

// requireBatches checks that the journal holds exactly the given batches.
func requireBatches(t *testing.T, j *Journal, want []batch) {
	t.Helper()
	got := collect(t, j)
	k := 0
	for _, b := range want {
		for i := range b.recs {
			if k >= len(got) {
				t.Fatalf("journal ends after %d records; missing %v", k, b.locs[i])
			}
			if got[k].loc != b.locs[i] || got[k].rec.Type != b.recs[i].Type || !bytes.Equal(got[k].rec.Payload, b.recs[i].Payload) {
				t.Fatalf("record %d: got %v, want %v", k, got[k].loc, b.locs[i])
			}
			k++
		}
	}
	if k != len(got) {
		t.Fatalf("journal has %d records, want %d", len(got), k)
	}
}

func without(bs []batch, drop ...int) []batch {
	var out []batch
	for i, b := range bs {
		skip := false
		for _, d := range drop {
			skip = skip || i == d
		}
		if !skip {
			out = append(out, b)
		}
	}
	return out
}

func TestOpen_TornTailOnLastSegment(t *testing.T) {
	cases := []struct {
		name   string
		damage func(fs vfs.FS, last batch) error
	}{
		{"flip in last record payload", func(fs vfs.FS, last batch) error {
			l := last.locs[len(last.locs)-1]
			return kdbtest.FlipBit(fs, testDir+"/"+l.Segment.String(), l.Offset+recHeaderSize+5, 3)
		}},
		{"zeroed middle of batch", func(fs vfs.FS, last batch) error {
			l := last.locs[1]
			return kdbtest.ZeroRange(fs, testDir+"/"+l.Segment.String(), l.Offset, recHeaderSize)
		}},
		{"zeroed whole batch header sector", func(fs vfs.FS, last batch) error {
			l := last.locs[0]
			return kdbtest.ZeroRange(fs, testDir+"/"+l.Segment.String(), l.Offset, 8)
		}},
		{"file cut inside batch", func(fs vfs.FS, last batch) error {
			l := last.locs[2]
			return kdbtest.Truncate(fs, testDir+"/"+l.Segment.String(), l.Offset+40)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, j, bs := build(t, Options{}, 12) // batch 11 has 3 records
			img := fs.Clone()                    // as if the process died before Close
			mustClose(t, j)
			last := bs[len(bs)-1]
			if len(last.locs) != 3 {
				t.Fatalf("test needs a 3-record last batch")
			}
			if err := tc.damage(img, last); err != nil {
				t.Fatal(err)
			}
			// ReadOnly reports without changing anything.
			before, _ := vfs.ReadFile(img, testDir+"/"+last.locs[0].Segment.String())
			ro, rep, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10, ReadOnly: true})
			if err != nil {
				t.Fatalf("ReadOnly Open: %v", err)
			}
			if rep.TornAt != last.locs[0] || rep.TornBytesTruncated <= 0 || rep.TailLocation != last.locs[0] {
				t.Fatalf("ReadOnly report: %+v", rep)
			}
			requireBatches(t, ro, bs[:len(bs)-1])
			if _, err := ro.Append(Record{}); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("ReadOnly Append: %v", err)
			}
			mustClose(t, ro)
			after, _ := vfs.ReadFile(img, testDir+"/"+last.locs[0].Segment.String())
			if !bytes.Equal(before, after) {
				t.Fatalf("ReadOnly open changed the segment")
			}

			j2, rep := openMem(t, img, Options{})
			if rep.TornAt != last.locs[0] || rep.TornBytesTruncated <= 0 || len(rep.Skipped) != 0 {
				t.Fatalf("report: %+v", rep)
			}
			requireBatches(t, j2, bs[:len(bs)-1])
			locs, err := j2.Append(Record{Type: 9, Payload: []byte("after")})
			if err != nil {
				t.Fatal(err)
			}
			if locs[0] != last.locs[0] {
				t.Fatalf("append after truncation at %v, want %v", locs[0], last.locs[0])
			}
			mustClose(t, j2)
			j3, rep := openMem(t, img, Options{})
			defer mustClose(t, j3)
			if rep.TornBytesTruncated != 0 {
				t.Fatalf("second reopen truncated again: %+v", rep)
			}
			requireBatches(t, j3, append(bs[:len(bs)-1:len(bs)-1], batch{locs, []Record{{Type: 9, Payload: []byte("after")}}}))
		})
	}
}

func TestOpen_DamageElsewhereIsCorrupt(t *testing.T) {
	seg := func(l Location) string { return testDir + "/" + l.Segment.String() }
	cases := []struct {
		name    string
		closed  bool // image after Close (close mark present)
		victim  func(bs []batch) int
		damage  func(fs vfs.FS, l Location) error
		wantLoc func(bs []batch, v int) Location
	}{
		{"flip in earlier batch of last segment", false,
			func(bs []batch) int { return len(bs) - 3 },
			func(fs vfs.FS, l Location) error { return kdbtest.FlipBit(fs, seg(l), l.Offset+recHeaderSize, 0) },
			func(bs []batch, v int) Location { return bs[v].locs[0] }},
		{"zeroed record in earlier batch", false,
			func(bs []batch) int { return len(bs) - 2 },
			func(fs vfs.FS, l Location) error { return kdbtest.ZeroRange(fs, seg(l), l.Offset, recHeaderSize) },
			func(bs []batch, v int) Location { return bs[v].locs[0] }},
		{"flip in last batch after a clean close", true,
			func(bs []batch) int { return len(bs) - 1 },
			func(fs vfs.FS, l Location) error { return kdbtest.FlipBit(fs, seg(l), l.Offset+3, 1) },
			func(bs []batch, v int) Location { return bs[v].locs[0] }},
		{"flip in a sealed segment", false,
			func(bs []batch) int { return 2 },
			func(fs vfs.FS, l Location) error { return kdbtest.FlipBit(fs, seg(l), l.Offset+recHeaderSize+1, 7) },
			func(bs []batch, v int) Location { return bs[v].locs[0] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, j, bs := build(t, Options{}, 300)
			if j.Segments()[0].ID == j.Segments()[len(j.Segments())-1].ID {
				t.Fatal("test needs several segments")
			}
			img := fs.Clone()
			mustClose(t, j)
			if tc.closed {
				img = fs.Clone()
			}
			v := tc.victim(bs)
			if err := tc.damage(img, bs[v].locs[len(bs[v].locs)-1]); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), bs[v].locs[len(bs[v].locs)-1].Segment.String()+"@") {
				t.Fatalf("error does not name the segment: %v", err)
			}
			j2, rep := openMem(t, img, Options{SkipDamaged: true})
			defer mustClose(t, j2)
			want := tc.wantLoc(bs, v)
			if len(rep.Skipped) != 1 || rep.Skipped[0].From != want {
				t.Fatalf("Skipped: %+v, want one region from %v", rep.Skipped, want)
			}
			if v+1 < len(bs) && rep.Skipped[0].To != bs[v+1].locs[0] && bs[v+1].locs[0].Segment == want.Segment {
				t.Fatalf("Skipped to %v, want %v", rep.Skipped[0].To, bs[v+1].locs[0])
			}
			requireBatches(t, j2, without(bs, v))
			if _, err := j2.Append(Record{Type: 1, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpen_SegmentLevelDamage(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	segs := j.Segments()
	mustClose(t, j)
	if len(segs) < 4 {
		t.Fatalf("need 4 segments, have %d", len(segs))
	}
	name := func(id SegmentID) string { return testDir + "/" + id.String() }
	inSeg := func(id SegmentID) []int {
		var out []int
		for i, b := range bs {
			if b.locs[0].Segment == id {
				out = append(out, i)
			}
		}
		return out
	}
	t.Run("bad header in middle segment", func(t *testing.T) {
		img := fs.Clone()
		if err := kdbtest.FlipBit(img, name(segs[1].ID), segOffSeed, 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segs[1].ID.String()+"@0") {
			t.Fatalf("Open: %v", err)
		}
		j2, rep := openMem(t, img, Options{SkipDamaged: true})
		defer mustClose(t, j2)
		if len(rep.Skipped) != 1 || rep.Skipped[0].From != (Location{segs[1].ID, 0}) {
			t.Fatalf("Skipped: %+v", rep.Skipped)
		}
		requireBatches(t, j2, without(bs, inSeg(segs[1].ID)...))
	})
	t.Run("zeroed middle segment is damage", func(t *testing.T) {
		// Only the last segment's creation can be torn: a zeroed segment
		// before it was damaged, and is neither removed nor skipped
		// silently.
		img := fs.Clone()
		id := segs[1].ID
		before, err := vfs.ReadFile(img, name(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := kdbtest.ZeroRange(img, name(id), 0, int64(len(before))); err != nil {
			t.Fatal(err)
		}
		_, rep, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), id.String()+"@0") {
			t.Fatalf("Open: %v (report %+v), want ErrCorrupt naming %s@0", err, rep, id)
		}
		if after, err := vfs.ReadFile(img, name(id)); err != nil || len(after) != len(before) {
			t.Fatalf("the zeroed segment after a refused Open: %d bytes, %v; want %d", len(after), err, len(before))
		}
		j2, rep := openMem(t, img, Options{SkipDamaged: true})
		defer mustClose(t, j2)
		if len(rep.Skipped) != 1 || rep.Skipped[0].From != (Location{id, 0}) {
			t.Fatalf("Skipped: %+v, want the zeroed %s", rep.Skipped, id)
		}
		requireBatches(t, j2, without(bs, inSeg(id)...))
	})
	t.Run("missing middle segment", func(t *testing.T) {
		img := fs.Clone()
		if err := img.Remove(name(segs[2].ID)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
		j2, rep := openMem(t, img, Options{SkipDamaged: true})
		defer mustClose(t, j2)
		if len(rep.Skipped) != 1 || rep.Skipped[0].From.Segment != segs[2].ID {
			t.Fatalf("Skipped: %+v", rep.Skipped)
		}
		requireBatches(t, j2, without(bs, inSeg(segs[2].ID)...))
	})
	t.Run("sealed segment cut short", func(t *testing.T) {
		img := fs.Clone()
		idx := inSeg(segs[1].ID)
		cut := bs[idx[len(idx)-1]].locs[0] // drop the last batch and the seal
		if err := kdbtest.Truncate(img, name(cut.Segment), cut.Offset); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cut.String()) {
			t.Fatalf("Open: %v", err)
		}
	})
	t.Run("torn creation of the last segment is removed", func(t *testing.T) {
		fs, j, bs := build(t, Options{}, 20)
		// INVARIANT: no Append is pending, so no writer uses j.w: the
		// last use happened before Append returned.
		if err := j.rotate(); err != nil {
			t.Fatal(err)
		}
		next := j.w.seg.id
		img := fs.Clone()
		mustClose(t, j)
		if err := kdbtest.ZeroRange(img, name(next), 0, segHeaderSize); err != nil {
			t.Fatal(err)
		}
		j2, rep := openMem(t, img, Options{})
		if rep.TornAt != (Location{next, 0}) || rep.TornBytesTruncated != 64<<10 {
			t.Fatalf("report: %+v", rep)
		}
		requireBatches(t, j2, bs)
		if ok, _ := vfs.Exists(img, name(next)); ok {
			t.Fatalf("torn segment %s not removed", next)
		}
		locs, err := j2.Append(Record{Type: 3, Payload: []byte("new")})
		if err != nil {
			t.Fatal(err)
		}
		if locs[0] != (Location{next, segHeaderSize}) {
			t.Fatalf("append went to %v", locs[0])
		}
		mustClose(t, j2)
		j3, _ := openMem(t, img, Options{})
		defer mustClose(t, j3)
		requireBatches(t, j3, append(bs, batch{locs, []Record{{Type: 3, Payload: []byte("new")}}}))
	})
	t.Run("header of the last segment damaged with records after it", func(t *testing.T) {
		img := fs.Clone()
		last := segs[len(segs)-1].ID
		if err := kdbtest.FlipBit(img, name(last), 1, 1); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	})
}

// TestOpen_OutOfPlaceFrameIsCorrupt: a frame that verifies but does not
// belong where it is (wrong chain link, batch flags, after a seal) cannot
// come from a crash, so even at the tail it is ErrCorrupt, not a torn tail.
func TestOpen_OutOfPlaceFrameIsCorrupt(t *testing.T) {
	cases := []struct {
		name  string
		prev  func(realPrev uint64) uint64
		flags uint8
		typ   RecordType
	}{
		{"chain broken", func(p uint64) uint64 { return p ^ 1 }, flagBatchBegin | flagBatchEnd, 1},
		{"no batch begin", func(p uint64) uint64 { return p }, flagBatchEnd, 1},
		{"internal type inside a batch", func(p uint64) uint64 { return p }, flagBatchBegin, typeCloseMark},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, j, _ := build(t, Options{}, 5)
			tail := j.Tail()
			mustClose(t, j) // writes a close mark at tail
			seg := j.Segments()[len(j.Segments())-1]
			name := testDir + "/" + seg.ID.String()
			data, err := vfs.ReadFile(fs, name)
			if err != nil {
				t.Fatal(err)
			}
			h, err := decodeSegHeader(data, seg.ID.String())
			if err != nil {
				t.Fatal(err)
			}
			mark := tail.Offset // the close mark's frame
			realPrev := binary.LittleEndian.Uint64(data[mark+recOffSum:])
			at := mark + frameSize(0)
			frame, _ := appendFrame(nil, h.seed, at, tc.prev(realPrev), 0, tc.typ, tc.flags, []byte("stray"))
			f, err := fs.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(frame, at); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
			_, _, err = Open(testDir, Options{FS: fs, SegmentSize: 64 << 10})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), Location{seg.ID, at}.String()) {
				t.Fatalf("Open: %v, want ErrCorrupt at %v", err, Location{seg.ID, at})
			}
		})
	}
}

func TestOpen_RemovesUnfinishedSegmentTemp(t *testing.T) {
	fs, j, bs := build(t, Options{}, 10)
	mustClose(t, j)
	stray := testDir + "/db-2.log.tmp"
	if err := vfs.WriteFileAtomic(fs, stray, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	other := testDir + "/notes.tmp"
	if err := vfs.WriteFileAtomic(fs, other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, _, err := Open(testDir, Options{FS: fs, SegmentSize: 64 << 10, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, ro)
	if ok, _ := vfs.Exists(fs, stray); !ok {
		t.Fatal("ReadOnly Open removed a file")
	}
	j2, _ := openMem(t, fs, Options{})
	defer mustClose(t, j2)
	if ok, _ := vfs.Exists(fs.CrashClone(vfs.CrashOptions{}), stray); ok {
		t.Fatal("unfinished segment temp file not removed durably")
	}
	if ok, _ := vfs.Exists(fs, other); !ok {
		t.Fatal("Open removed a file that is not the journal's")
	}
	requireBatches(t, j2, bs)
}

// TestOpen_CreatesItsDirectoryDurably: Open creates its directory and the
// missing parents durably (each new entry synced into its parent), so that
// a power loss right after acknowledged appends loses neither the
// directory nor the records in it.
func TestOpen_CreatesItsDirectoryDurably(t *testing.T) {
	for _, dir := range []string{"/j", "/a/b/j"} {
		t.Run(dir, func(t *testing.T) {
			fs := vfs.NewMem()
			j, _, err := Open(dir, Options{FS: fs, SegmentSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			recs := []Record{{Type: 1, Payload: payload(0, 0, 100)}}
			if _, err := j.Append(recs...); err != nil {
				t.Fatal(err)
			}
			img := fs.CrashClone(vfs.CrashOptions{}) // a power loss: nothing unsynced kept
			mustClose(t, j)
			j2, _, err := Open(dir, Options{FS: img, SegmentSize: 64 << 10, ReadOnly: true})
			if err != nil {
				t.Fatalf("after a power loss: %v (the directory was not durable)", err)
			}
			defer mustClose(t, j2)
			if got := collect(t, j2); len(got) != 1 || !bytes.Equal(got[0].rec.Payload, recs[0].Payload) {
				t.Fatalf("after a power loss the journal holds %d records, want the 1 acknowledged", len(got))
			}
		})
	}
}

// TestOpen_WriterAfterReopenProvesWhatOpenSynced: Open syncs the last
// segment before the writer resumes on it, so the first frame written after
// a reopen records that the bytes before it are synced, and damage in a
// batch acknowledged before a crash and the reopen is then ErrCorrupt
// naming it, not a torn tail cut silently together with the batch
// acknowledged after it.
func TestOpen_WriterAfterReopenProvesWhatOpenSynced(t *testing.T) {
	fs := vfs.NewMem()
	j, _ := openMem(t, fs, Options{})
	old, err := j.Append(Record{Type: 1, Payload: payload(0, 0, 300)})
	if err != nil {
		t.Fatal(err)
	}
	// A crash, not a Close: a close mark would prove the batch durable by
	// itself.
	fs2 := fs.CrashClone(vfs.CrashOptions{KeepUnsynced: 1})
	mustClose(t, j)
	fs = fs2
	j, _ = openMem(t, fs, Options{})
	if _, err := j.Append(Record{Type: 1, Payload: payload(1, 0, 300)}); err != nil {
		t.Fatal(err)
	}
	img := fs.CrashClone(vfs.CrashOptions{}) // every acknowledged byte is synced
	mustClose(t, j)
	if err := kdbtest.FlipBit(img, testDir+"/"+old[0].Segment.String(), old[0].Offset+recHeaderSize+5, 3); err != nil {
		t.Fatal(err)
	}
	j2, rep, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10})
	if err == nil {
		n := len(collect(t, j2))
		mustClose(t, j2)
		t.Fatalf("Open cut damage at %s in an acknowledged batch as a torn tail (torn at %s, %d bytes; %d records left), want ErrCorrupt", old[0], rep.TornAt, rep.TornBytesTruncated, n)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), old[0].String()) {
		t.Fatalf("Open: %v, want ErrCorrupt naming %s", err, old[0])
	}
}
