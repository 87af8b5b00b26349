package pagefile

import (
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// freeListHas reports whether page id is on f's free list.
func freeListHas(f *File, id PageID) bool {
	return slices.ContainsFunc(f.FreeRanges(), func(r Range) bool { return r.Start <= id && id < r.End() })
}

// TestFile_ProofAllocateRunLieInsideTheRun guards the proof of every page
// of a run AllocateRun takes from the loaded list, not only its first:
// here the loaded list joins the true free pages 13..22 and the live pages
// 23..24 into one range, and a run of 12 starting at 13 would overwrite
// them. TestFile_ProofAllocateRun puts its lie at the start of the run.
func TestFile_ProofAllocateRunLieInsideTheRun(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{23, 2})
	release := holdProof(t)
	f, _ := mustOpen(t, mem, Options{})
	defer f.Close()
	defer release() // before Close, which waits for the proof
	first, err := f.AllocateRun(12)
	if err != nil {
		t.Fatal(err)
	}
	if first != 43 {
		t.Fatalf("AllocateRun(12) = %v, want 43 (the end of the file): 23..24 are live", first)
	}
	if p := f.FreeListProof(); p.Lies != 1 || p.FirstLie != 23 {
		t.Fatalf("proof %+v", p)
	}
	for id := first; id < first+12; id++ {
		if err := f.Write(id, testType, nil); err != nil {
			t.Fatal(err)
		}
	}
	release()
	waitProof(t, f)
	checkLive(t, f, live)
}

// TestFile_ProofOwnerFreesALiedPageFirst guards Free's claim of a page of
// the loaded list before anything else revealed the lie: the owner frees
// its live page, which the list already calls free. The owner wins (the
// list lied); without the claim Free failed with ErrDoubleFree, and the
// index's Update with it. TestFile_ProofOwnerWritesAndFrees frees only
// after a Write had revealed the lie.
func TestFile_ProofOwnerFreesALiedPageFirst(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{5, 3})
	// The background proof waits until the owner's Free is seen: run at
	// once, it could find the other lies (5, 7) first.
	release := holdProof(t)
	f, _ := mustOpen(t, mem, Options{})
	defer f.Close()
	defer release() // before Close, which waits for the proof
	if err := f.Free(6); err != nil {
		t.Fatalf("owner's Free of a page the loaded list calls free: %v", err)
	}
	delete(live, 6)
	if p := f.FreeListProof(); p.Lies != 1 || p.FirstLie != 6 {
		t.Fatalf("proof %+v", p)
	}
	release()
	waitProof(t, f)
	if err := f.Checkpoint(MetaUpdate{Root: 3}); err != nil {
		t.Fatal(err)
	}
	checkLive(t, f, live)
	if !freeListHas(f, 6) || freeListHas(f, 5) || freeListHas(f, 7) {
		t.Fatalf("free list %v, want 6 free and 5, 7 (live) not", f.FreeRanges())
	}
}

// TestFile_ProofIOErrorKeepsPagesQuarantined guards the background proof's
// handling of a read error: it proves nothing, so the quarantined pages
// stay out of the free list (until the next Open scans). Giving them back
// handed out live page 4, which the loaded list had called free.
func TestFile_ProofIOErrorKeepsPagesQuarantined(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{3, 2})
	var failReads atomic.Bool
	fsys := vfs.Intercept(mem, func(e vfs.Event) error {
		if failReads.Load() && e.Op == vfs.OpRead && filepath.Base(e.Path) == dataFileName {
			return syscall.EIO
		}
		return nil
	})
	release := make(chan struct{})
	testProofGate = func() { <-release }
	defer func() { testProofGate = nil }()
	f, _ := mustOpen(t, fsys, Options{})
	defer f.Close()
	id, err := f.Allocate() // 3 lies: 4 and 13..22 go to the quarantine
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(id, testType, nil); err != nil {
		t.Fatal(err)
	}
	if p := f.FreeListProof(); p.Lies != 1 || p.Quarantined != 11 {
		t.Fatalf("proof %+v", p)
	}
	failReads.Store(true)
	close(release)
	if err := f.WaitFreeListProof(); !errors.Is(err, syscall.EIO) {
		t.Errorf("WaitFreeListProof after a read error stopped the proof: %v, want EIO", err)
	}
	failReads.Store(false)
	if p := f.FreeListProof(); p.Quarantined != 11 || freeListHas(f, 4) {
		t.Fatalf("after a failed background proof: %+v, free list %v; want the 11 pages still quarantined", p, f.FreeRanges())
	}
	for range 5 {
		id, err := f.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		if live[id] != nil {
			t.Fatalf("Allocate handed out live %v", id)
		}
		if err := f.Write(id, testType+1, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkLive(t, f, live)
}

// TestFile_ProofOwnerFreesAQuarantinedPage guards the claim of a
// quarantined page by its owner (Free, Write): the owner spoke, so the
// page leaves the quarantine. Left there, the background proof, which
// reads the page as the last checkpoint stamped it, found it free after
// the owner's Free was checkpointed, and gave it back to the free list
// while its next owner had it: page 4 allocated twice.
func TestFile_ProofOwnerFreesAQuarantinedPage(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{3, 2})
	release := make(chan struct{})
	testProofGate = func() { <-release }
	defer func() { testProofGate = nil }()
	f, _ := mustOpen(t, mem, Options{})
	defer f.Close()
	id, err := f.Allocate() // 3 lies: 4 and 13..22 go to the quarantine
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(id, testType, nil); err != nil {
		t.Fatal(err)
	}
	// The owner of 4 frees it; the checkpoint stamps it free on disk; it
	// is allocated and written again.
	if err := f.Free(4); err != nil {
		t.Fatal(err)
	}
	delete(live, 4)
	if err := f.Checkpoint(MetaUpdate{Root: 3}); err != nil {
		t.Fatal(err)
	}
	if id, err := f.Allocate(); err != nil || id != 4 {
		t.Fatalf("Allocate = %v, %v; want 4, freed by its owner", id, err)
	}
	live[4] = payloadFor(4, 5, 60)
	if err := f.Write(4, testType, live[4]); err != nil {
		t.Fatal(err)
	}
	close(release)
	f.WaitFreeListProof()
	if freeListHas(f, 4) {
		t.Fatalf("page 4, allocated and written, is on the free list %v", f.FreeRanges())
	}
	checkLive(t, f, live)
}
