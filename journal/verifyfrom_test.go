package journal

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// lastOf returns the location of the last record of a batch: a batch end,
// the kind of location a caller's replay position is.
func lastOf(b batch) Location { return b.locs[len(b.locs)-1] }

// midBatch returns the index of a batch in a segment that has at least two
// segments before it, so a VerifyFrom there leaves segments unverified.
func midBatch(t *testing.T, bs []batch) int {
	t.Helper()
	first := bs[0].locs[0].Segment
	for i, b := range bs {
		if b.locs[0].Segment >= first+2 && lastOf(b).Segment == b.locs[0].Segment && i+5 < len(bs) {
			return i
		}
	}
	t.Fatal("test needs more segments")
	return 0
}

func TestOpen_VerifyFromLeavesEarlierSegmentsForLater(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	full, frep := openMem(t, fs.Clone(), Options{})
	fullSegs := full.Segments()
	mustClose(t, full)

	k := midBatch(t, bs)
	from := lastOf(bs[k])
	j2, rep := openMem(t, fs, Options{VerifyFrom: from})
	defer mustClose(t, j2)
	if want := int(from.Segment - bs[0].locs[0].Segment); rep.Unverified != want {
		t.Fatalf("Unverified = %d, want %d", rep.Unverified, want)
	}
	if rep.TailLocation != frep.TailLocation || rep.Records >= frep.Records || rep.Records == 0 {
		t.Fatalf("report %+v, full open %+v", rep, frep)
	}
	for _, s := range j2.Segments() {
		if s.Verified != (s.ID >= from.Segment) {
			t.Fatalf("segment %v: Verified=%v with VerifyFrom %v", s.ID, s.Verified, from)
		}
	}
	// Read verifies the frame it returns, in an unverified segment too.
	r, err := j2.Read(bs[1].locs[0])
	if err != nil || !bytes.Equal(r.Payload, bs[1].recs[0].Payload) {
		t.Fatalf("Read in an unverified segment: %v", err)
	}
	// Replay from the position sees exactly the later batches.
	var n int
	if err := j2.Iterate(from, func(loc Location, r Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	want := 1 // Iterate includes the record at from
	for _, b := range bs[k+1:] {
		want += len(b.locs)
	}
	if n != want {
		t.Fatalf("Iterate from %v gave %d records, want %d", from, n, want)
	}
	// Iterating from the start verifies the earlier segments whole.
	requireBatches(t, j2, bs)
	got := j2.Segments()
	if len(got) != len(fullSegs) {
		t.Fatalf("%d segments, want %d", len(got), len(fullSegs))
	}
	for i := range got {
		if got[i] != fullSegs[i] {
			t.Fatalf("segment after lazy verification %+v, after full open %+v", got[i], fullSegs[i])
		}
	}
	if _, err := j2.Append(Record{Type: 1, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

func TestOpen_VerifyFromFindsEarlierDamageLater(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	k := midBatch(t, bs)
	from := lastOf(bs[k])
	victim := bs[2].locs[0]
	if err := kdbtest.FlipBit(fs, testDir+"/"+victim.Segment.String(), victim.Offset+recHeaderSize+1, 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(testDir, Options{FS: fs.Clone(), SegmentSize: 64 << 10}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("full Open: %v, want ErrCorrupt", err)
	}
	j2, _ := openMem(t, fs, Options{VerifyFrom: from})
	defer mustClose(t, j2)
	if _, err := j2.Read(victim); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read of the damaged record: %v, want ErrCorrupt", err)
	}
	if _, err := j2.Read(bs[3].locs[0]); err != nil {
		t.Fatalf("Read of an intact record next to it: %v", err)
	}
	if err := j2.Iterate(from, func(Location, Record) error { return nil }); err != nil {
		t.Fatalf("Iterate from the replay position: %v", err)
	}
	for _, check := range []func() error{
		j2.Verify,
		func() error { return j2.Iterate(Location{}, func(Location, Record) error { return nil }) },
	} {
		err := check()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.Segment.String()+"@") {
			t.Fatalf("got %v, want ErrCorrupt naming %v", err, victim.Segment)
		}
	}
}

func TestOpen_VerifyFromChecksEarlierHeaders(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	from := lastOf(bs[midBatch(t, bs)])
	if err := kdbtest.FlipBit(fs, testDir+"/"+bs[0].locs[0].Segment.String(), segOffSeed, 0); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(testDir, Options{FS: fs, SegmentSize: 64 << 10, VerifyFrom: from})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged earlier header: %v, want ErrCorrupt", err)
	}
}

// A VerifyFrom that is not a batch end (a caller's mistake, or a location
// the journal no longer has) falls back to verifying its segment whole.
func TestOpen_VerifyFromNotABatchEnd(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	k := midBatch(t, bs)
	for k < len(bs) && len(bs[k].locs) < 2 {
		k++
	}
	for _, from := range []Location{
		bs[k].locs[0], // first record of a 2- or 3-record batch
		{bs[k].locs[0].Segment, bs[k].locs[0].Offset + 8}, // inside a frame
		{bs[k].locs[0].Segment, 1 << 40},                  // past the end
	} {
		img := fs.Clone()
		j2, rep := openMem(t, img, Options{VerifyFrom: from})
		full, frep := openMem(t, fs.Clone(), Options{})
		if rep.TailLocation != frep.TailLocation {
			t.Fatalf("VerifyFrom %v: tail %v, full open %v", from, rep.TailLocation, frep.TailLocation)
		}
		requireBatches(t, j2, bs)
		mustClose(t, j2)
		mustClose(t, full)
	}
}

// A torn tail is found and truncated the same way when Open starts
// verifying at a replay position in the last segment.
func TestOpen_VerifyFromTornTail(t *testing.T) {
	fs, j, bs := build(t, Options{}, 40)
	img := fs.Clone() // as if the process died before Close
	mustClose(t, j)
	last := bs[len(bs)-1]
	if err := kdbtest.FlipBit(img, testDir+"/"+last.locs[0].Segment.String(), lastOf(last).Offset+recHeaderSize+5, 3); err != nil {
		t.Fatal(err)
	}
	from := lastOf(bs[len(bs)-4])
	if from.Segment != last.locs[0].Segment {
		t.Fatal("test needs the replay position in the last segment")
	}
	full, frep := openMem(t, img.Clone(), Options{})
	mustClose(t, full)
	j2, rep := openMem(t, img, Options{VerifyFrom: from})
	defer mustClose(t, j2)
	if rep.TornAt != frep.TornAt || rep.TornBytesTruncated != frep.TornBytesTruncated || rep.TailLocation != frep.TailLocation || rep.TornAt != last.locs[0] {
		t.Fatalf("report %+v, full open %+v", rep, frep)
	}
	requireBatches(t, j2, bs[:len(bs)-1])
}

// Segments grow a step (allocStep) ahead of their records, so what Open
// reads after the last record of a crashed journal is at most a step, not
// the rest of SegmentSize.
func TestOpen_ReadsLittlePastTheLastRecord(t *testing.T) {
	mem := vfs.NewMem()
	j, _, err := Open(testDir, Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := j.Append(Record{Type: 1, Payload: payload(i, 0, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	img := mem.CrashClone(vfs.CrashOptions{}) // no close mark
	if s := j.Segments()[0].Size; s != allocStep {
		t.Fatalf("segment of 20 KiB preallocated to %d bytes, want %d", s, allocStep)
	}
	big := make([]byte, 3<<20)
	if _, err := j.Append(Record{Type: 1, Payload: big}); err != nil {
		t.Fatal(err)
	}
	if s, want := j.Segments()[0].Size, int64(4*allocStep); s != want {
		t.Fatalf("after 3 MiB more: %d bytes, want %d", s, want)
	}
	mustClose(t, j)

	var read atomic.Int64
	counted := vfs.Intercept(img, func(e vfs.Event) error {
		if e.Op == vfs.OpRead {
			read.Add(1)
		}
		return nil
	})
	j2, rep, err := Open(testDir, Options{FS: counted})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, j2)
	if rep.Records != 20 {
		t.Fatalf("report: %+v", rep)
	}
	// The header, then 1 MiB windows: the whole 32 MiB would take 33.
	if n := read.Load(); n > 3 {
		t.Fatalf("Open made %d reads of a segment holding 20 KiB", n)
	}
}

// Open verifies the replay position's segment only from the position on;
// Verify must still verify the frames before it in that segment, or a
// check of a store would pass over damage there.
func TestVerify_CoversTheReplaySegmentBeforeThePosition(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	k := midBatch(t, bs)
	// A replay position with at least two batches before it in its segment.
	for k+1 < len(bs) && (bs[k-2].locs[0].Segment != lastOf(bs[k]).Segment) {
		k++
	}
	from := lastOf(bs[k])
	if bs[k-2].locs[0].Segment != from.Segment {
		t.Fatal("test needs two batches before the replay position in its segment")
	}
	// Intact: Verify passes, and a second Verify has nothing left to do.
	j1, _ := openMem(t, fs.Clone(), Options{VerifyFrom: from})
	if err := j1.Verify(); err != nil {
		t.Fatalf("Verify of an intact journal: %v", err)
	}
	mustClose(t, j1)

	for _, tc := range []struct {
		name   string
		victim Location
		off    int64 // from the victim's payload
	}{
		{"payload two batches before", bs[k-2].locs[0], recHeaderSize + 1},
		{"the batch just before", lastOf(bs[k-1]), recHeaderSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := fs.Clone()
			if err := kdbtest.FlipBit(img, testDir+"/"+tc.victim.Segment.String(), tc.victim.Offset+tc.off, 2); err != nil {
				t.Fatal(err)
			}
			j2, _ := openMem(t, img, Options{VerifyFrom: from})
			defer mustClose(t, j2)
			// The replay from the position is unaffected.
			if err := j2.Iterate(from, func(Location, Record) error { return nil }); err != nil {
				t.Fatalf("Iterate from the replay position: %v", err)
			}
			err := j2.Verify()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), from.Segment.String()+"@") {
				t.Fatalf("Verify: %v, want ErrCorrupt naming %v", err, from.Segment)
			}
			if err := j2.Iterate(Location{}, func(Location, Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Iterate from the start: %v, want ErrCorrupt", err)
			}
		})
	}
}
