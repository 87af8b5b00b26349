package raftkdb

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

const (
	spaceSeg = 256 << 10
	spaceCk  = 256 << 10
)

// journalOnDisk returns the bytes of the journal's segment files.
func journalOnDisk(t testing.TB, fs vfs.FS, dir string) int64 {
	t.Helper()
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			sz, _, err := fs.Stat(dir + "/" + n)
			if err != nil {
				t.Fatal(err)
			}
			size += sz
		}
	}
	return size
}

// TestStore_DeleteRangeFreesJournal runs a raft log's life: entries of 4 KiB
// (kept in kdb's journal, over the 512-byte ValueThreshold) appended in
// batches, and after every "snapshot" a DeleteRange of all but the trailing
// entries, then a checkpoint. One 4 KiB stable value written first stays
// live the whole time, so without compaction its segment would pin every
// later one. After every checkpoint the journal on disk must be within the
// engine's documented bound (docs/DESIGN.md, "Space: compaction and the
// factor"): 4 × live + 3 × CheckpointBytes + 3 × SegmentSize.
func TestStore_DeleteRangeFreesJournal(t *testing.T) {
	fs := vfs.NewMem()
	opts := &kdb.Options{FS: fs, SegmentSize: spaceSeg, CheckpointBytes: spaceCk, CheckpointInterval: -1}
	s, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pin := make([]byte, 4096)
	if err := s.Set([]byte("old"), pin); err != nil {
		t.Fatal(err)
	}
	const (
		dataSize  = 4096
		perBatch  = 16
		snapEvery = 512 // entries between snapshots
		trailing  = 128 // entries kept after a snapshot
	)
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	var written, maxJournal int64
	next := uint64(1)
	for r := range rounds {
		for range snapEvery / perBatch {
			var logs []*raft.Log
			for range perBatch {
				e := entry(next, 1, dataSize)
				logs = append(logs, e)
				written += int64(encodedSize(e))
				next++
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
		}
		first, last := bounds(t, s)
		if err := s.DeleteRange(first, last-trailing); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if f, l := bounds(t, s); f != last-trailing+1 || l != last {
			t.Fatalf("round %d: log %d..%d after DeleteRange(%d, %d)", r, f, l, first, last-trailing)
		}
		first = last - trailing + 1
		live := int64(len(pin) + 1)
		for i := first; i <= last; i++ {
			live += int64(encodedSize(entry(i, 1, dataSize)))
		}
		bound := 4*live + 3*spaceCk + 3*spaceSeg
		j := journalOnDisk(t, fs, "/db")
		maxJournal = max(maxJournal, j)
		if j > bound {
			st := s.DB().Stats()
			t.Fatalf("round %d: journal %d KiB after the checkpoint, bound %d KiB (live %d KiB; pinned %d KiB, compactions %d)",
				r, j>>10, bound>>10, live>>10, st.PinnedBytes>>10, st.Compactions)
		}
		if r == rounds-1 {
			st := s.DB().Stats()
			t.Logf("written %d KiB of entries in %d rounds; journal on disk %d KiB (max %d KiB), live %d KiB, bound %d KiB; "+
				"%d segments removed, %d compaction passes moved %d values, pinned %d KiB",
				written>>10, rounds, j>>10, maxJournal>>10, live>>10, bound>>10,
				st.SegmentsRemoved, st.Compactions, st.CompactedValues, st.PinnedBytes>>10)
		}
	}
	if v, err := s.Get([]byte("old")); err != nil || len(v) != len(pin) {
		t.Fatalf("the old stable value: %d bytes, %v", len(v), err)
	}
	if _, err := s.DB().Check(); err != nil {
		t.Fatal(err)
	}
}
