package recovery

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestRun_NeedReachesTheNewestReferencedSegment guards need(): the journal
// must reach the newest segment the index refers to (Options.Refs), not
// only the replay position's. If the index names a segment after the end
// of the journal, Run fails with ErrCorrupt naming it; with SkipDamaged
// the new segment takes a number after it, never the number of a segment
// the index refers to (whose values would then resolve to other records).
func TestRun_NeedReachesTheNewestReferencedSegment(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	for i := range 5 {
		s.write("k"+string(rune('a'+i)), "v")
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	last := s.st.Journal.Tail().Segment
	s.close()
	ahead := last + 3 // the index refers to values there; the journal ends at last
	refs := func(o *Options) {
		o.Refs = func(*index.Store) (journal.SegmentID, journal.SegmentID, error) { return 1, ahead, nil }
	}
	_, err := run(t, mem.Clone(), "/db", refs)
	if !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), ahead.String()) {
		t.Fatalf("Run: %v, want ErrCorrupt naming %v", err, ahead)
	}
	s2 := mustRun(t, mem.Clone(), "/db", func(o *Options) {
		refs(o)
		o.Journal.SkipDamaged = true
	})
	defer s2.close()
	if tail := s2.st.Journal.Tail().Segment; tail <= ahead {
		t.Fatalf("with SkipDamaged new records go to %v, at or before %v, which the index refers to", tail, ahead)
	}
}

// TestRun_TornTailNeedsCheckpoint guards the rule that a cut torn journal
// tail alone sets Report.NeedsCheckpoint (its documentation lists it): a
// store checkpointed at its last record whose journal ends in a few bytes
// of an unfinished write replays nothing, applies no db.redo and trusts
// its free list, so the torn tail is the only reason.
func TestRun_TornTailNeedsCheckpoint(t *testing.T) {
	mem := vfs.NewMem()
	s := mustRun(t, mem, "/db", nil)
	for i := range 5 {
		s.write("k"+string(rune('a'+i)), "v")
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	tail := s.st.Journal.Tail()
	s.close() // writes a close mark at tail
	torn := make([]byte, 16)
	for i := range torn {
		torn[i] = 0xab
	}
	name := "/db/" + tail.Segment.String()
	f, err := mem.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(torn, tail.Offset+64); err != nil { // past the close mark's frame
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := mustRun(t, mem, "/db", nil)
	defer s2.close()
	rep := s2.rep
	if rep.Journal.TornBytesTruncated == 0 || rep.RecordsReplayed != 0 || rep.PageFile.RedoApplied || rep.PageFile.FreeListPath != pagefile.FreeListTrusted {
		t.Fatalf("want only a torn tail: %+v", rep)
	}
	if !rep.NeedsCheckpoint {
		t.Fatalf("a torn tail was cut but NeedsCheckpoint is not set: %+v", rep)
	}
}
