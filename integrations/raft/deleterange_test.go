package raftkdb

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestStore_DeleteRangeOverGaps: DeleteRange holds the range's indexes as
// runs of consecutive ones; over a log with gaps, split into many batches
// (small segments), from the bottom up and from the top down, it deletes
// exactly the entries in the range.
func TestStore_DeleteRangeOverGaps(t *testing.T) {
	s := openMem(t, vfs.NewMem(), &kdb.Options{SegmentSize: 64 << 10})
	defer s.Close()
	present := map[uint64]bool{}
	for _, blk := range [][2]uint64{{1, 500}, {600, 1100}, {2000, 2400}} {
		var logs []*raft.Log
		for i := blk[0]; i <= blk[1]; i++ {
			logs = append(logs, entry(i, 1, 16))
			present[i] = true
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, first, last uint64) {
		t.Helper()
		for i := uint64(1); i <= 2500; i++ {
			var got raft.Log
			err := s.GetLog(i, &got)
			switch {
			case present[i] && err != nil:
				t.Fatalf("%s: entry %d: %v, want it there", what, i, err)
			case !present[i] && err != raft.ErrLogNotFound:
				t.Fatalf("%s: entry %d: %v, want raft.ErrLogNotFound", what, i, err)
			}
		}
		if f, l := bounds(t, s); f != first || l != last {
			t.Fatalf("%s: bounds %d..%d, want %d..%d", what, f, l, first, last)
		}
	}
	del := func(lo, hi uint64) {
		t.Helper()
		if err := s.DeleteRange(lo, hi); err != nil {
			t.Fatal(err)
		}
		for i := lo; i <= hi; i++ {
			delete(present, i)
		}
	}
	del(300, 2100) // bottom up: the range ends below the last entry
	check("after DeleteRange(300, 2100)", 1, 2400)
	del(250, 5000) // top down: the range reaches the last entry
	check("after DeleteRange(250, 5000)", 1, 249)
	del(7, 7)
	check("after DeleteRange(7, 7)", 1, 249)
}

// TestStore_DeleteRangeOverGapsKeepsItsOrder: a DeleteRange split into
// batches deletes from the top down when it reaches the last entry and
// from the bottom up otherwise, gaps or not: a power loss before any of its
// fsyncs leaves the entries it deleted a suffix (top down) or a prefix
// (bottom up) of the ones in the range, never a hole among them.
func TestStore_DeleteRangeOverGapsKeepsItsOrder(t *testing.T) {
	for _, topDown := range []bool{true, false} {
		mem := vfs.NewCrashableMem()
		var images []*vfs.MemFS
		record := false
		fs := vfs.Intercept(mem, func(e vfs.Event) error {
			if record && e.Op == vfs.OpSync {
				images = append(images, mem.CrashClone(vfs.CrashOptions{}))
			}
			return nil
		})
		opts := &kdb.Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1}
		s, err := Open("/db", opts)
		if err != nil {
			t.Fatal(err)
		}
		var in []uint64 // the entries in the range, in index order
		for _, blk := range [][2]uint64{{1, 400}, {500, 900}, {1000, 1400}, {1500, 1600}} {
			var logs []*raft.Log
			for i := blk[0]; i <= blk[1]; i++ {
				logs = append(logs, entry(i, 1, 16))
				if i >= 100 && (topDown || i <= 1450) {
					in = append(in, i)
				}
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
		}
		lo, hi := uint64(100), uint64(1450)
		if topDown {
			hi = 5000
		}
		record = true
		if err := s.DeleteRange(lo, hi); err != nil {
			t.Fatal(err)
		}
		record = false
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if len(images) < 3 {
			t.Fatalf("top down %v: %d fsyncs in DeleteRange, want it split into several batches", topDown, len(images))
		}
		for k, img := range images {
			s, err := Open("/db", &kdb.Options{FS: img, SegmentSize: 64 << 10, CheckpointInterval: -1})
			if err != nil {
				t.Fatalf("top down %v, image %d: %v", topDown, k, err)
			}
			var gone []bool
			for _, i := range in {
				var e raft.Log
				err := s.GetLog(i, &e)
				if err != nil && err != raft.ErrLogNotFound {
					t.Fatal(err)
				}
				gone = append(gone, err != nil)
			}
			s.Close()
			// Top down: kept entries, then deleted ones; bottom up: deleted,
			// then kept.
			for j := 1; j < len(gone); j++ {
				if topDown && gone[j-1] && !gone[j] || !topDown && !gone[j-1] && gone[j] {
					t.Fatalf("top down %v, power loss before fsync %d of DeleteRange: entry %d deleted and %d kept out of order (a hole)", topDown, k+1, in[j-1], in[j])
				}
			}
		}
	}
}
