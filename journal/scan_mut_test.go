package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// strayFrame is a frame a test writes into a segment: it verifies (a
// correct sum, chained to the frame before it) but is out of place.
type strayFrame struct {
	typ     RecordType
	flags   uint8
	payload []byte
}

// writeStray writes frames at offset at of segment id, the first chained to
// the frame whose sum is prev, each chained to the one before, and returns
// the offset of each.
func writeStray(t *testing.T, fs vfs.FS, id SegmentID, at int64, prev uint64, frames ...strayFrame) []int64 {
	t.Helper()
	name := testDir + "/" + id.String()
	data, err := vfs.ReadFile(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeSegHeader(data, id.String())
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	var offs []int64
	for _, fr := range frames {
		off := at + int64(len(buf))
		offs = append(offs, off)
		buf, prev = appendFrame(buf, h.seed, off, prev, 0, fr.typ, fr.flags, fr.payload)
	}
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(buf, at); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return offs
}

// sumAt returns the sum field of the frame at loc.
func sumAt(t *testing.T, fs vfs.FS, loc Location) uint64 {
	t.Helper()
	data, err := vfs.ReadFile(fs, testDir+"/"+loc.Segment.String())
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(data[loc.Offset+recOffSum:])
}

// TestOpen_OutOfPlaceFramesAreCorrupt guards rules of scanRecords that
// TestOpen_OutOfPlaceFrameIsCorrupt does not reach: a verifying frame after
// a segment's seal, a batch that begins inside an unfinished batch, an
// internal record (close mark) that ends a user batch (the existing case
// gives its close mark a payload, so another rule refused it), and an
// internal record carrying a payload. None can come from a
// crash; each must fail Open with ErrCorrupt naming the frame, never be
// accepted as records (a frame after a seal in a sealed segment would be
// replayed; a batch begun inside another would silently drop the first).
func TestOpen_OutOfPlaceFramesAreCorrupt(t *testing.T) {
	cases := []struct {
		name string
		// place writes the stray frames and returns the location Open
		// must name.
		place func(t *testing.T, fs vfs.FS, segs []SegmentInfo) Location
	}{
		{"record after the seal of a sealed segment", func(t *testing.T, fs vfs.FS, segs []SegmentInfo) Location {
			s := segs[0]
			if !s.Sealed || s.Last.IsZero() {
				t.Fatalf("first segment not sealed: %+v", s)
			}
			offs := writeStray(t, fs, s.ID, s.End.Offset, sumAt(t, fs, s.Last),
				strayFrame{1, flagBatchBegin | flagBatchEnd, []byte("after the seal")})
			return Location{s.ID, offs[0]}
		}},
		{"batch begins inside a batch", func(t *testing.T, fs vfs.FS, segs []SegmentInfo) Location {
			s := segs[len(segs)-1]
			offs := writeStray(t, fs, s.ID, s.End.Offset, sumAt(t, fs, s.Last),
				strayFrame{1, flagBatchBegin, []byte("first of a batch")},
				strayFrame{1, flagBatchBegin | flagBatchEnd, []byte("a second begin")})
			return Location{s.ID, offs[1]}
		}},
		{"internal record ending a user batch", func(t *testing.T, fs vfs.FS, segs []SegmentInfo) Location {
			s := segs[len(segs)-1]
			offs := writeStray(t, fs, s.ID, s.End.Offset, sumAt(t, fs, s.Last),
				strayFrame{1, flagBatchBegin, []byte("user record")},
				strayFrame{typeCloseMark, flagBatchEnd, nil})
			return Location{s.ID, offs[1]}
		}},
		{"close mark with a payload", func(t *testing.T, fs vfs.FS, segs []SegmentInfo) Location {
			s := segs[len(segs)-1]
			offs := writeStray(t, fs, s.ID, s.End.Offset, sumAt(t, fs, s.Last),
				strayFrame{typeCloseMark, flagBatchBegin | flagBatchEnd, []byte("payload")})
			return Location{s.ID, offs[0]}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, j, _ := build(t, Options{SegmentSize: 8 << 10}, 60)
			mustClose(t, j) // the last segment ends with a close mark
			segs := j.Segments()
			if len(segs) < 2 {
				t.Fatalf("want several segments, got %d", len(segs))
			}
			at := tc.place(t, fs, segs)
			j2, _, err := Open(testDir, Options{FS: fs, SegmentSize: 8 << 10})
			if err == nil {
				mustClose(t, j2)
				t.Fatalf("Open accepted the stray frames at %v", at)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), at.String()) {
				t.Fatalf("Open: %v, want ErrCorrupt at %v", err, at)
			}
		})
	}
}

// TestOpen_SegmentFileUnderAnotherName guards the check that a segment's
// header names the segment its file name says, on both paths of Open: the
// verifying scan and the header-only open of segments before the replay
// position (Options.VerifyFrom). Two sealed segments whose files were
// swapped (a bad restore or copy) are each intact, since a record's sum
// does not cover its segment's number: without the check the journal would
// serve their records out of order.
func TestOpen_SegmentFileUnderAnotherName(t *testing.T) {
	for _, verifyFrom := range []bool{false, true} {
		t.Run(fmt.Sprintf("verifyFrom=%v", verifyFrom), func(t *testing.T) {
			fs, j, bs := build(t, Options{SegmentSize: 8 << 10}, 60)
			mustClose(t, j)
			segs := j.Segments()
			if len(segs) < 4 {
				t.Fatalf("want at least 4 segments, got %d", len(segs))
			}
			a, b := segPath(segs[1].ID), segPath(segs[2].ID)
			if err := fs.Rename(a, testDir+"/swap"); err != nil {
				t.Fatal(err)
			}
			if err := fs.Rename(b, a); err != nil {
				t.Fatal(err)
			}
			if err := fs.Rename(testDir+"/swap", b); err != nil {
				t.Fatal(err)
			}
			o := Options{FS: fs, SegmentSize: 8 << 10}
			if verifyFrom {
				o.VerifyFrom = lastOf(bs[len(bs)-1])
				if o.VerifyFrom.Segment != segs[len(segs)-1].ID {
					t.Fatalf("last batch at %v, not in the last segment", o.VerifyFrom)
				}
			}
			j2, _, err := Open(testDir, o)
			if err == nil {
				mustClose(t, j2)
				t.Fatal("Open accepted segments whose headers name other segments")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "header names segment") {
				t.Fatalf("Open: %v, want ErrCorrupt naming the header's segment", err)
			}
		})
	}
}

// TestOpen_VerifyFromInsideABatch guards the rule that Open starts
// verifying at VerifyFrom only if the frame there ends a batch (Options:
// "If the frame at VerifyFrom is not a verifying batch end, its segment is
// verified from its start"). Started inside a batch, Open would leave the
// frames before it unverified (damage there passed Open), and the later
// walk of that prefix (Verify, DB.Check) could not end on a batch end and
// reported an intact journal as corrupt.
func TestOpen_VerifyFromInsideABatch(t *testing.T) {
	mem, j, bs := build(t, Options{}, 30)
	mustClose(t, j)
	var from Location
	var victim Location
	for i := len(bs) - 1; i > 0; i-- {
		if len(bs[i].locs) == 3 {
			from, victim = bs[i].locs[0], bs[i-1].locs[0]
			break
		}
	}
	if from.IsZero() || from.Segment != victim.Segment {
		t.Fatalf("no three-record batch with a batch before it in its segment")
	}
	o := Options{FS: mem.Clone(), VerifyFrom: from}
	j2, _, err := Open(testDir, o)
	if err != nil {
		t.Fatalf("Open from inside a batch: %v", err)
	}
	if err := j2.Verify(); err != nil {
		t.Fatalf("Verify of an intact journal opened from inside a batch: %v", err)
	}
	mustClose(t, j2)

	img := mem.Clone()
	if err := kdbtest.FlipBit(img, segPath(victim.Segment), victim.Offset+recHeaderSize+3, 1); err != nil {
		t.Fatal(err)
	}
	o.FS = img
	j3, _, err := Open(testDir, o)
	if err == nil {
		mustClose(t, j3)
		t.Fatalf("Open passed damage at %v, before a VerifyFrom inside a batch", victim)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
}
