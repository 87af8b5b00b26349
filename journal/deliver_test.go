package journal

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// delivered records what Options.Deliver received (payloads copied).
type delivered struct{ recs []entry }

func (d *delivered) fn(loc Location, r Record) error {
	d.recs = append(d.recs, entry{loc, Record{Type: r.Type, Payload: bytes.Clone(r.Payload)}})
	return nil
}

// requireDelivered checks that d holds exactly the records of want, in order.
func requireDelivered(t *testing.T, d *delivered, want []batch) {
	t.Helper()
	k := 0
	for _, b := range want {
		for i := range b.recs {
			if k >= len(d.recs) {
				t.Fatalf("%d records delivered; missing %v", k, b.locs[i])
			}
			got := d.recs[k]
			if got.loc != b.locs[i] || got.rec.Type != b.recs[i].Type || !bytes.Equal(got.rec.Payload, b.recs[i].Payload) {
				t.Fatalf("delivered record %d at %v, want %v", k, got.loc, b.locs[i])
			}
			k++
		}
	}
	if k != len(d.recs) {
		t.Fatalf("%d records delivered, want %d (first extra at %v)", len(d.recs), k, d.recs[k].loc)
	}
}

func TestOpen_DeliverGivesTheRecordsAfterVerifyFrom(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	k := midBatch(t, bs)
	for _, tc := range []struct {
		name string
		from Location
		want []batch
	}{
		{"zero: every record", Location{}, bs},
		{"batch end mid-journal", lastOf(bs[k]), bs[k+1:]},
		{"first batch", lastOf(bs[0]), bs[1:]},
		{"last batch: nothing", lastOf(bs[len(bs)-1]), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d delivered
			j2, rep := openMem(t, fs.Clone(), Options{VerifyFrom: tc.from, Deliver: d.fn})
			defer mustClose(t, j2)
			requireDelivered(t, &d, tc.want)
			// The same records Iterate gives (it includes the one at from).
			var it []entry
			if err := j2.Iterate(tc.from, func(loc Location, r Record) error {
				if tc.from.Less(loc) || tc.from.IsZero() {
					it = append(it, entry{loc, Record{Type: r.Type, Payload: bytes.Clone(r.Payload)}})
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(it) != len(d.recs) {
				t.Fatalf("Iterate gives %d records, Deliver %d", len(it), len(d.recs))
			}
			if rep.Records < int64(len(d.recs)) {
				t.Fatalf("report counts %d records verified, %d delivered", rep.Records, len(d.recs))
			}
		})
	}
	t.Run("ReadOnly", func(t *testing.T) {
		var d delivered
		j2, _ := openMem(t, fs.Clone(), Options{VerifyFrom: lastOf(bs[k]), Deliver: d.fn, ReadOnly: true})
		defer mustClose(t, j2)
		requireDelivered(t, &d, bs[k+1:])
	})
	t.Run("not a batch end", func(t *testing.T) {
		// A replay position inside a batch (not what a caller keeps, but
		// allowed): its segment is verified whole, and the rest of the
		// batch is delivered.
		var b int
		for b = k; len(bs[b].locs) < 2; b++ {
		}
		from := bs[b].locs[0]
		var d delivered
		j2, _ := openMem(t, fs.Clone(), Options{VerifyFrom: from, Deliver: d.fn})
		defer mustClose(t, j2)
		want := append([]batch{{bs[b].locs[1:], bs[b].recs[1:]}}, bs[b+1:]...)
		requireDelivered(t, &d, want)
	})
}

func TestOpen_DeliverNeverGivesATornBatch(t *testing.T) {
	fs, j, bs := build(t, Options{}, 12) // batch 11 has 3 records
	img := fs.Clone()                    // as if the process died before Close
	mustClose(t, j)
	last := bs[len(bs)-1]
	// The last record of the last batch torn: its first two records verify,
	// but the batch has no verifying end.
	l := last.locs[len(last.locs)-1]
	if err := kdbtest.FlipBit(img, testDir+"/"+l.Segment.String(), l.Offset+recHeaderSize+5, 3); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		var d delivered
		j2, rep := openMem(t, img, Options{VerifyFrom: lastOf(bs[3]), Deliver: d.fn, ReadOnly: ro})
		if rep.TornAt != last.locs[0] {
			t.Fatalf("ReadOnly=%v: report %+v, want a torn tail at %v", ro, rep, last.locs[0])
		}
		requireDelivered(t, &d, bs[4:len(bs)-1])
		mustClose(t, j2)
	}
}

func TestOpen_DeliverThenDamageFailsOpen(t *testing.T) {
	// Damage that Open finds after it delivered records fails Open: the
	// caller must discard what it built (Options.Deliver).
	fs, j, bs := build(t, Options{}, 300)
	img := fs.Clone()
	mustClose(t, j)
	v := len(bs) - 3
	l := bs[v].locs[0]
	if err := kdbtest.FlipBit(img, testDir+"/"+l.Segment.String(), l.Offset+recHeaderSize, 0); err != nil {
		t.Fatal(err)
	}
	k := midBatch(t, bs)
	var d delivered
	_, _, err := Open(testDir, Options{FS: img, SegmentSize: 64 << 10, VerifyFrom: lastOf(bs[k]), Deliver: d.fn})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
	if len(d.recs) == 0 {
		t.Fatal("test needs records delivered before the damage")
	}
	for _, e := range d.recs {
		if !e.loc.Less(l) {
			t.Fatalf("delivered %v, at or after the damaged batch at %v", e.loc, l)
		}
	}

	// With SkipDamaged the damaged batch alone is left out.
	var ds delivered
	j2, rep := openMem(t, img, Options{SkipDamaged: true, VerifyFrom: lastOf(bs[k]), Deliver: ds.fn})
	defer mustClose(t, j2)
	if len(rep.Skipped) != 1 {
		t.Fatalf("Skipped: %+v", rep.Skipped)
	}
	requireDelivered(t, &ds, without(bs[k+1:], v-k-1))
}

func TestOpen_DeliverErrorFailsOpen(t *testing.T) {
	fs, j, bs := build(t, Options{}, 50)
	mustClose(t, j)
	boom := errors.New("boom")
	n := 0
	_, _, err := Open(testDir, Options{FS: fs, SegmentSize: 64 << 10, VerifyFrom: lastOf(bs[10]), Deliver: func(Location, Record) error {
		n++
		if n == 7 {
			return boom
		}
		return nil
	}})
	if !errors.Is(err, boom) || n != 7 {
		t.Fatalf("Open: %v after %d deliveries, want boom after 7", err, n)
	}
	// Nothing was changed: a later open delivers everything again.
	var d delivered
	j2, _ := openMem(t, fs, Options{VerifyFrom: lastOf(bs[10]), Deliver: d.fn})
	defer mustClose(t, j2)
	requireDelivered(t, &d, bs[11:])
}

func TestOpen_DeliverChecksTheReplayPosition(t *testing.T) {
	fs, j, bs := build(t, Options{}, 300)
	mustClose(t, j)
	k := midBatch(t, bs)
	from := lastOf(bs[k])
	clone := func() vfs.FS { return fs.Clone() }
	segs := func() []SegmentInfo {
		j, _ := openMem(t, fs.Clone(), Options{})
		defer mustClose(t, j)
		return j.Segments()
	}()
	cases := []struct {
		name string
		from Location
		fs   func() vfs.FS
		want error
	}{
		{"not at a frame", Location{from.Segment, from.Offset + recAlign}, clone, ErrCorrupt},
		{"segment beyond the journal", Location{segs[len(segs)-1].ID + 1, segHeaderSize}, clone, ErrNotFound},
		{"segment removed", from, func() vfs.FS {
			c := fs.Clone()
			// Remove the segments up to and including the replay position's
			// (what the journal's own open accepts: a prefix removed).
			for id := segs[0].ID; id <= from.Segment; id++ {
				if err := c.Remove(testDir + "/" + id.String()); err != nil {
					t.Fatal(err)
				}
			}
			return c
		}, ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d delivered
			_, _, err := Open(testDir, Options{FS: tc.fs(), SegmentSize: 64 << 10, VerifyFrom: tc.from, Deliver: d.fn})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.from.String()) {
				t.Fatalf("Open: %v, want %v naming %v", err, tc.want, tc.from)
			}
			// Without Deliver, Open does not check it (Iterate does).
			j, _, err := Open(testDir, Options{FS: tc.fs(), SegmentSize: 64 << 10, VerifyFrom: tc.from})
			if err != nil {
				t.Fatalf("Open without Deliver: %v", err)
			}
			mustClose(t, j)
		})
	}
}

func TestOpen_DeliverAcrossWindows(t *testing.T) {
	for _, size := range []int{400 << 10, 90 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testDeliverAcrossWindows(t, size) })
	}
}

// testDeliverAcrossWindows: batches of three records of about size bytes,
// many spanning two of the scan's 1 MiB windows (and larger than a window
// if size is), each delivered whole and intact.
func testDeliverAcrossWindows(t *testing.T, size int) {
	fs := vfs.NewMem()
	j, _ := openMem(t, fs, Options{SegmentSize: 8 << 20})
	var bs []batch
	for b := 0; b < 12; b++ {
		recs := make([]Record, 3)
		for i := range recs {
			recs[i] = Record{Type: 1, Payload: payload(b, i, size+b*4099+i)}
		}
		locs, err := j.Append(recs...)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, batch{locs, recs})
	}
	mustClose(t, j)
	var d delivered
	j2, _ := openMem(t, fs, Options{SegmentSize: 8 << 20, Deliver: func(loc Location, r Record) error {
		if err := d.fn(loc, r); err != nil {
			return err
		}
		if len(r.Payload) == 0 {
			return fmt.Errorf("empty payload at %v", loc)
		}
		return nil
	}})
	defer mustClose(t, j2)
	requireDelivered(t, &d, bs)
}
