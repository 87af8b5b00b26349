package pagefile

import (
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestFile_HeldPagesCountsImagesPinnedByACheckpoint follows HeldPages
// through writes, frees and a prepared checkpoint whose pages are rewritten
// and freed before it commits: the images it holds stay counted until the
// commit, then only the pages dirtied since remain.
func TestFile_HeldPagesCountsImagesPinnedByACheckpoint(t *testing.T) {
	f, _ := mustOpen(t, vfs.NewMem(), Options{PageSize: 1024})
	defer f.Close()
	first, err := f.AllocateRun(6)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, held, dirty int) {
		t.Helper()
		if got := f.HeldPages(); got != held {
			t.Fatalf("%s: HeldPages = %d, want %d", step, got, held)
		}
		if got := f.DirtyCount(); got != dirty {
			t.Fatalf("%s: DirtyCount = %d, want %d", step, got, dirty)
		}
	}
	check("allocated", 0, 0)
	for id := first; id < first+6; id++ {
		if err := f.Write(id, testType, payloadFor(id, 1, 200)); err != nil {
			t.Fatal(err)
		}
	}
	check("written", 6, 6)
	if err := f.Write(first, testType, payloadFor(first, 2, 200)); err != nil {
		t.Fatal(err)
	}
	check("rewritten before a checkpoint", 6, 6)
	if err := f.Free(first + 5); err != nil {
		t.Fatal(err)
	}
	check("one freed before a checkpoint", 5, 6) // a free stamp holds no image

	cp, err := f.PrepareCheckpoint(MetaUpdate{Root: first})
	if err != nil {
		t.Fatal(err)
	}
	check("prepared", 5, 6)
	// Rewrite two pages of the batch and free a third: the batch still
	// holds their old images.
	for _, id := range []PageID{first, first + 1} {
		if err := f.Write(id, testType, payloadFor(id, 3, 200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Free(first + 2); err != nil {
		t.Fatal(err)
	}
	check("changed while prepared", 4+3, 6) // 4 dirty images, 3 pinned
	if err := f.CommitCheckpoint(cp); err != nil {
		t.Fatal(err)
	}
	check("committed", 2, 3)
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	check("second checkpoint", 0, 0)
}

// TestFile_HeldPagesAbandonedCheckpoint: a prepared checkpoint that is never
// committed pins its images only until a later checkpoint commits.
func TestFile_HeldPagesAbandonedCheckpoint(t *testing.T) {
	f, _ := mustOpen(t, vfs.NewMem(), Options{PageSize: 1024})
	defer f.Close()
	first, err := f.AllocateRun(4)
	if err != nil {
		t.Fatal(err)
	}
	for id := first; id < first+4; id++ {
		if err := f.Write(id, testType, payloadFor(id, 1, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.PrepareCheckpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	for id := first; id < first+4; id++ {
		if err := f.Write(id, testType, payloadFor(id, 2, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.HeldPages(); got != 8 {
		t.Fatalf("HeldPages = %d, want 8", got)
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	if got := f.HeldPages(); got != 0 {
		t.Fatalf("HeldPages after a later checkpoint = %d, want 0", got)
	}
}
