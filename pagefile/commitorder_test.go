package pagefile

import (
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestCommitCheckpoint_NeverTwiceNorOutOfOrder: a prepared checkpoint is
// committed once, in the order prepared. Committing one again, or one
// prepared before the last committed, is refused and writes nothing: it
// would stamp a new meta over a free list and pages older than the
// committed ones (pages freed since handed out again, pages written since
// lost).
func TestCommitCheckpoint_NeverTwiceNorOutOfOrder(t *testing.T) {
	mem := vfs.NewMem()
	f, _ := mustOpen(t, mem, Options{PageSize: 512})
	defer f.Close()
	first, err := f.AllocateRun(3)
	if err != nil {
		t.Fatal(err)
	}
	for id := first; id < first+3; id++ {
		if err := f.Write(id, testType, payloadFor(id, 1, 40)); err != nil {
			t.Fatal(err)
		}
	}
	cp1, err := f.PrepareCheckpoint(MetaUpdate{Root: first})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(first, testType, payloadFor(first, 2, 40)); err != nil {
		t.Fatal(err)
	}
	cp2, err := f.PrepareCheckpoint(MetaUpdate{Root: first})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CommitCheckpoint(cp2); err != nil {
		t.Fatal(err)
	}
	seq := f.Meta().Seq
	for name, cp := range map[string]*Checkpoint{"the same again": cp2, "an older one": cp1} {
		if err := f.CommitCheckpoint(cp); err == nil || !strings.Contains(err.Error(), "older than the last committed") {
			t.Errorf("commit of %s: %v, want it refused", name, err)
		}
		if got := f.Meta().Seq; got != seq {
			t.Errorf("commit of %s: meta seq %d, want %d (nothing written)", name, got, seq)
		}
	}
	if err := f.Err(); err != nil {
		t.Errorf("the handle failed: %v (a refused commit writes nothing)", err)
	}
}
