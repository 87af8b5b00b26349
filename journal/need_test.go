package journal

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_NeedNamesMissingSegments: segments the caller needs
// (Options.Need) that are missing before the first or after the last
// segment are ErrCorrupt naming them; with SkipDamaged they are skipped and
// a new segment is numbered after Need.Last.
func TestOpen_NeedNamesMissingSegments(t *testing.T) {
	t.Parallel()
	fs, ids := closedSegments(t)
	last := ids[len(ids)-1]
	// GC removed db-1.log: not missing when the caller needs from db-2.log.
	if err := fs.Remove(filepath.Join(testDir, ids[0].String())); err != nil {
		t.Fatal(err)
	}
	j, _ := openMem(t, fs, Options{SegmentSize: 8 << 10, ReadOnly: true, Need: Need{First: 2, Last: last}})
	mustClose(t, j)

	for _, c := range []struct {
		need Need
		want string
	}{
		{Need{First: 1}, "db-1.log@0: segment db-1.log is missing: the journal begins at db-2.log"},
		// One segment past the end: the last one the caller needs is
		// gone (a bound off by one would let it pass).
		{Need{First: 2, Last: last + 1}, (last + 1).String() + "@0: segment " + (last + 1).String() + " is missing: the journal ends at " + last.String()},
		{Need{First: 2, Last: last + 2}, (last + 1).String() + "@0: segments " + (last + 1).String() + " to " + (last + 2).String() + " are missing: the journal ends at " + last.String()},
	} {
		_, _, err := Open(testDir, Options{FS: fs, SegmentSize: 8 << 10, Need: c.need})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Need %+v: %v, want ErrCorrupt with %q", c.need, err, c.want)
		}
	}

	j, rep := openMem(t, fs, Options{SegmentSize: 8 << 10, SkipDamaged: true, Need: Need{First: 1, Last: last + 2}})
	if len(rep.Skipped) != 2 {
		t.Errorf("skipped %+v, want the first and the last two", rep.Skipped)
	}
	locs, err := j.Append(Record{Type: 1, Payload: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	if locs[0].Segment != last+3 {
		t.Errorf("appended at %s, want a new %s", locs[0], last+3)
	}
	mustClose(t, j)
}

// closedSegments builds a closed journal of 120 batches in 8 KiB segments
// (4 or more) and returns its file system and its segments in order.
func closedSegments(t *testing.T) (*vfs.MemFS, []SegmentID) {
	t.Helper()
	fs, j, _ := build(t, Options{SegmentSize: 8 << 10}, 120)
	mustClose(t, j)
	names, err := fs.ReadDir(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []SegmentID
	for _, n := range names {
		if id, ok := parseSegmentName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // ReadDir sorts names, not numbers
	if len(ids) < 4 {
		t.Fatalf("%d segments, want 4 or more", len(ids))
	}
	return fs, ids
}

// TestIterate_FromAMissingSegmentIsNotFound: Iterate from a segment the
// journal does not hold (skipped as missing by SkipDamaged) is
// ErrNotFound; it never starts silently at the next segment, whose records
// a caller would take for those it asked for.
func TestIterate_FromAMissingSegmentIsNotFound(t *testing.T) {
	t.Parallel()
	fs, ids := closedSegments(t)
	mid := ids[len(ids)/2]
	if err := fs.Remove(filepath.Join(testDir, mid.String())); err != nil {
		t.Fatal(err)
	}
	j, rep := openMem(t, fs, Options{SegmentSize: 8 << 10, ReadOnly: true, SkipDamaged: true})
	defer mustClose(t, j)
	if len(rep.Skipped) == 0 {
		t.Fatalf("the missing %s was not skipped: %+v", mid, rep)
	}
	err := j.Iterate(Location{Segment: mid}, func(loc Location, _ Record) error {
		return fmt.Errorf("record at %s", loc)
	})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), mid.String()) {
		t.Errorf("Iterate from the missing %s: %v, want ErrNotFound naming it", mid, err)
	}
	// From the segment after it: its records.
	n := 0
	if err := j.Iterate(Location{Segment: mid + 1}, func(Location, Record) error { n++; return nil }); err != nil || n == 0 {
		t.Errorf("Iterate from %s: %d records, %v", mid+1, n, err)
	}
}
