package raftkdb

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// A compaction pass that ran while the log's journal values were live,
// then a DeleteRange whose delete records fit in the same journal segment:
// the next checkpoint's pass still moves what is left, and the journal is
// within kdb's bound (4 × live + 3 × CheckpointBytes + 3 × SegmentSize)
// right after it. (kdb used to run the pass at most once per replay
// segment: 3,328 KiB against a bound of 1,696.)
func TestEngine_CompactionAfterDeletesInOneSegment(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, SegmentSize: spaceSeg, CheckpointBytes: spaceCk, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, 4096)
	const n = 768 // 3 MiB of journal values, 12 segments
	for i := range n {
		if err := db.Put("x", []byte(fmt.Sprintf("k%04d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil { // its pass finds every value live
		t.Fatal(err)
	}
	segs := db.Stats().JournalSegments
	b := kdb.NewBatch()
	for i := 10; i < n; i++ {
		b.Delete("x", []byte(fmt.Sprintf("k%04d", i)))
	}
	if err := db.Write(b); err != nil { // ~20 KiB of records: the same segment
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	live := int64(10 * len(val))
	bound := 4*live + 3*spaceCk + 3*spaceSeg
	j := journalOnDisk(t, fs, "/db")
	st := db.Stats()
	t.Logf("segments %d before the deletes, %d after the checkpoint; journal %d KiB, bound %d KiB, pinned %d KiB, compactions %d",
		segs, st.JournalSegments, j>>10, bound>>10, st.PinnedBytes>>10, st.Compactions)
	if j > bound {
		t.Fatalf("journal %d KiB right after a checkpoint, over the bound %d KiB: the compaction pass was skipped", j>>10, bound>>10)
	}
}
