package journal

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

const testDir = "/j"

// openMem opens a journal on fs with small segments.
func openMem(t testing.TB, fs vfs.FS, o Options) (*Journal, *OpenReport) {
	t.Helper()
	o.FS = fs
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 10
	}
	j, rep, err := Open(testDir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, rep
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// payload returns a deterministic payload for record i of batch b.
func payload(b, i, n int) []byte {
	p := make([]byte, n)
	for k := range p {
		p[k] = byte(b*31 + i*7 + k)
	}
	copy(p, fmt.Sprintf("b%d/r%d", b, i))
	return p
}

type entry struct {
	loc Location
	rec Record
}

// collect iterates the whole journal, copying the payloads (Iterate's are
// valid only during its callback).
func collect(t testing.TB, j *Journal) []entry {
	t.Helper()
	var out []entry
	if err := j.Iterate(Location{}, func(loc Location, r Record) error {
		out = append(out, entry{loc, Record{Type: r.Type, Payload: bytes.Clone(r.Payload)}})
		return nil
	}); err != nil {
		t.Fatalf("Iterate: %v", err)
	}
	return out
}

func TestJournal_AppendReadIterateReopen(t *testing.T) {
	fs := vfs.NewMem()
	j, rep := openMem(t, fs, Options{})
	if rep.Segments != 0 || rep.TailLocation != (Location{1, segHeaderSize}) {
		t.Fatalf("fresh open report: %+v", rep)
	}
	var want []entry
	for b := 0; b < 200; b++ {
		n := b%3 + 1
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{Type: RecordType(b % 7), Payload: payload(b, i, b*13%900)}
		}
		locs, err := j.Append(recs...)
		if err != nil {
			t.Fatalf("Append %d: %v", b, err)
		}
		for i := range recs {
			want = append(want, entry{locs[i], recs[i]})
		}
	}
	check := func(j *Journal) {
		t.Helper()
		got := collect(t, j)
		if len(got) != len(want) {
			t.Fatalf("Iterate: %d records, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].loc != want[i].loc || got[i].rec.Type != want[i].rec.Type || !bytes.Equal(got[i].rec.Payload, want[i].rec.Payload) {
				t.Fatalf("record %d: got %v type %d, want %v type %d", i, got[i].loc, got[i].rec.Type, want[i].loc, want[i].rec.Type)
			}
			r, err := j.Read(want[i].loc)
			if err != nil || r.Type != want[i].rec.Type || !bytes.Equal(r.Payload, want[i].rec.Payload) {
				t.Fatalf("Read %v: %v", want[i].loc, err)
			}
			buf := make([]byte, 0, 512)
			r, err = j.ReadInto(want[i].loc, buf)
			if err != nil || !bytes.Equal(r.Payload, want[i].rec.Payload) {
				t.Fatalf("ReadInto %v: %v", want[i].loc, err)
			}
			if aliased := len(r.Payload) > 0 && &r.Payload[0] == &buf[:1][0]; len(r.Payload) > 0 && aliased != (len(r.Payload) <= 512) {
				t.Fatalf("ReadInto %v: payload of %d bytes aliased the 512-byte buffer: %v", want[i].loc, len(r.Payload), aliased)
			}
		}
	}
	check(j)
	if segs := j.Segments(); len(segs) < 2 {
		t.Fatalf("expected rotation, got %d segments", len(segs))
	}
	tail := j.Tail()
	mustClose(t, j)

	j, rep = openMem(t, fs, Options{})
	defer mustClose(t, j)
	if rep.TornBytesTruncated != 0 || len(rep.Skipped) != 0 || rep.Records != int64(len(want)) {
		t.Fatalf("reopen report: %+v", rep)
	}
	if rep.TailLocation.Less(tail) {
		t.Fatalf("tail went back: %v < %v", rep.TailLocation, tail)
	}
	check(j)
}

func TestJournal_ConcurrentAppend(t *testing.T) {
	fs := vfs.NewMem()
	j, _ := openMem(t, fs, Options{})
	const writers, per = 8, 50
	var wg sync.WaitGroup
	locs := make([][]Location, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				l, err := j.Append(Record{Type: 1, Payload: payload(w, i, 100)}, Record{Type: 2, Payload: payload(w, i+1000, 10)})
				if err != nil {
					t.Error(err)
					return
				}
				locs[w] = append(locs[w], l...)
			}
		}()
	}
	wg.Wait()
	st := j.Stats()
	if st.Records != writers*per*2 || st.Batches != writers*per {
		t.Fatalf("stats: %+v", st)
	}
	got := collect(t, j)
	if len(got) != writers*per*2 {
		t.Fatalf("iterated %d", len(got))
	}
	for k := 0; k < len(got); k += 2 {
		if got[k].rec.Type != 1 || got[k+1].rec.Type != 2 || got[k+1].loc.Offset != got[k].loc.Offset+frameSize(100) {
			t.Fatalf("batch at %v not contiguous", got[k].loc)
		}
	}
	mustClose(t, j)
	if _, err := j.Append(Record{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
}

func TestJournal_IterateFrom(t *testing.T) {
	_, j, bs := build(t, Options{}, 200)
	defer mustClose(t, j)
	all := collect(t, j)
	for _, k := range []int{0, 1, 57, 133, 199} {
		for i, from := range bs[k].locs {
			var got []entry
			if err := j.Iterate(from, func(loc Location, r Record) error {
				got = append(got, entry{loc, r})
				return nil
			}); err != nil {
				t.Fatalf("Iterate(%v): %v", from, err)
			}
			idx := 0
			for all[idx].loc != from {
				idx++
			}
			if len(got) != len(all)-idx || got[0].loc != from {
				t.Fatalf("Iterate(%v) (record %d of its batch): %d records, want %d", from, i, len(got), len(all)-idx)
			}
		}
	}
	// From the start of a segment, and the callback's error stops it.
	seg := j.Segments()[1]
	stop := errors.New("stop")
	n := 0
	err := j.Iterate(Location{seg.ID, 0}, func(loc Location, r Record) error {
		if n == 0 && loc != seg.First {
			t.Fatalf("first record %v, want %v", loc, seg.First)
		}
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("Iterate: %v after %d", err, n)
	}
	if err := j.Iterate(j.Tail(), func(Location, Record) error { return errors.New("record past the tail") }); err != nil {
		t.Fatal(err)
	}
}

// TestJournal_ConcurrentReadersAndRemoval runs appenders, readers,
// iterators and RemoveBefore together (meant for -race).
func TestJournal_ConcurrentReadersAndRemoval(t *testing.T) {
	j, _ := openMem(t, vfs.NewMem(), Options{SegmentSize: 8192})
	defer mustClose(t, j)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []entry
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				rec := Record{Type: 5, Payload: payload(w, i, 300)}
				locs, err := j.Append(rec)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, entry{locs[0], rec})
				mu.Unlock()
			}
		}()
	}
	var rwg sync.WaitGroup
	for r := 0; r < 3; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				mu.Lock()
				var e entry
				if len(acked) > 0 {
					e = acked[(k*7919)%len(acked)]
				}
				mu.Unlock()
				if e.rec.Payload != nil {
					got, err := j.Read(e.loc)
					if err == nil && !bytes.Equal(got.Payload, e.rec.Payload) {
						t.Errorf("Read(%v) returned other bytes", e.loc)
					} else if err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("Read(%v): %v", e.loc, err)
					}
				}
				if r == 0 {
					err := j.Iterate(Location{}, func(Location, Record) error { return nil })
					if err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("Iterate: %v", err)
					}
				}
				if r == 1 && k%10 == 0 {
					if _, err := j.RemoveBefore(j.Tail()); err != nil {
						t.Errorf("RemoveBefore: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rwg.Wait()
	// The remover may not have run while segments were there to remove.
	if _, err := j.RemoveBefore(j.Tail()); err != nil {
		t.Fatal(err)
	}
	if segs := j.Segments(); len(segs) != 1 {
		t.Fatalf("%d segments left", len(segs))
	}
	if st := j.Stats(); st.Records != 400 || st.Removed == 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// Iterate delivers payloads from its read window without copying them; a
// batch that spans windows is read again for delivery. Every payload must
// still be the one written.
func TestJournal_IterateAcrossWindows(t *testing.T) {
	j, _ := openMem(t, vfs.NewMem(), Options{SegmentSize: 32 << 20})
	defer mustClose(t, j)
	var want []entry
	for b := range 40 {
		recs := make([]Record, b%4+1)
		for i := range recs {
			recs[i] = Record{Type: RecordType(i + 1), Payload: payload(b, i, 1+(b*7919+i*104729)%(300<<10))}
		}
		locs, err := j.Append(recs...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			want = append(want, entry{locs[i], recs[i]})
		}
	}
	if tail := j.Tail(); tail.Offset < 3*readChunk {
		t.Fatalf("journal of %d bytes: the test needs several windows", tail.Offset)
	}
	got := collect(t, j)
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].loc != want[i].loc || got[i].rec.Type != want[i].rec.Type || !bytes.Equal(got[i].rec.Payload, want[i].rec.Payload) {
			t.Fatalf("record %d at %v differs", i, want[i].loc)
		}
	}
}
