package pagefile

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// lieFreeFile rewrites dir's db.free so that it also lists the pages of
// extra as free: intact, with the right store ID, checkpoint ID and page
// count, and lying.
func lieFreeFile(t testing.TB, fsys vfs.FS, dir string, extra ...Range) {
	t.Helper()
	name := filepath.Join(dir, freeFileName)
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	ff, err := decodeFreeFile(b, name)
	if err != nil {
		t.Fatal(err)
	}
	l := ff.toFreeList()
	for _, r := range extra {
		l.remove(r)
		if err := l.freeRange(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := vfs.WriteFileAtomic(fsys, name, encodeFreeFile(ff.storeID, ff.id, ff.pageCount, l), 0o600); err != nil {
		t.Fatal(err)
	}
}

// proofStore creates a store of pages [3, 43) with [13, 23) freed and
// checkpointed, closed, and returns the live pages' contents.
func proofStore(t testing.TB, fsys vfs.FS, dir string) map[PageID][]byte {
	t.Helper()
	f, _, err := Open(dir, Options{FS: fsys, PageSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.AllocateRun(40)
	if err != nil || first != FirstDataPage {
		t.Fatalf("AllocateRun = %v, %v", first, err)
	}
	live := map[PageID][]byte{}
	for id := first; id < first+40; id++ {
		p := payloadFor(id, 0, 100)
		if err := f.Write(id, testType, p); err != nil {
			t.Fatal(err)
		}
		live[id] = p
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	for id := PageID(13); id < 23; id++ {
		if err := f.Free(id); err != nil {
			t.Fatal(err)
		}
		delete(live, id)
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return live
}

// checkLive fails unless every page of live reads back unchanged.
func checkLive(t testing.TB, f *File, live map[PageID][]byte) {
	t.Helper()
	for id, want := range live {
		typ, p, err := f.Read(id)
		if err != nil || typ != testType || !bytes.Equal(p, want) {
			t.Fatalf("live %v: %d %.30q %v, want %.30q", id, typ, p, err, want)
		}
	}
}

// waitProof waits until the background proof has nothing left.
// holdProof holds the background proof before its first batch until the
// returned release is called (or the test ends), so that a test can look
// at the lies found in the foreground before the background finds more.
func holdProof(t testing.TB) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	testProofGate = func() { <-ch }
	t.Cleanup(func() { release(); testProofGate = nil })
	return release
}

func waitProof(t testing.TB, f *File) FreeListProof {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := f.FreeListProof()
		if p.Quarantined == 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("background proof not done: %+v", p)
		}
		time.Sleep(time.Millisecond)
	}
}

func fsFor(t *testing.T, name string) (vfs.FS, string) {
	if name == "os" {
		return vfs.OS, t.TempDir()
	}
	return vfs.NewMem(), "/db"
}

// TestFile_ProofCatchesLyingFreeList: a db.free that passes every check but
// lists live pages: no live page is ever handed out or overwritten, the lie
// is counted (first page, reason), the background proof gives the truly
// free pages back and drops the live ones, and the next checkpoint writes
// an honest db.free.
func TestFile_ProofCatchesLyingFreeList(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			fsys, dir := fsFor(t, name)
			live := proofStore(t, fsys, dir)
			// Live pages 4..7 and 30..31 listed free, below and above the
			// true free pages 13..22.
			lieFreeFile(t, fsys, dir, Range{4, 4}, Range{30, 2})
			f, rep, err := Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if rep.FreeListPath != FreeListTrusted || rep.FreePages != 16 {
				t.Fatalf("report %+v", rep)
			}
			var got []PageID
			for i := 0; i < 20; i++ {
				id, err := f.Allocate()
				if err != nil {
					t.Fatal(err)
				}
				if live[id] != nil {
					t.Fatalf("Allocate handed out live %v", id)
				}
				if err := f.Write(id, testType+1, payloadFor(id, 1, 80)); err != nil {
					t.Fatal(err)
				}
				got = append(got, id)
			}
			p := f.FreeListProof()
			if p.Lies == 0 || p.FirstLie != 4 || !strings.Contains(p.LieReason, "type 16") {
				t.Fatalf("proof %+v", p)
			}
			p = waitProof(t, f)
			// 4..7, 30, 31 lied; 13..22 are free on disk.
			if p.Lies != 6 || p.Proven != 10 || p.Unproven != 0 {
				t.Fatalf("proof after the background proof %+v", p)
			}
			if err := f.Checkpoint(MetaUpdate{Root: FirstDataPage}); err != nil {
				t.Fatal(err)
			}
			checkLive(t, f, live)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// The pages freed by the lie's proof went to the free list
			// (or were allocated): the next open trusts an honest list.
			f, rep, err = Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			if rep.FreeListPath != FreeListTrusted {
				t.Fatalf("second reopen %+v", rep)
			}
			st := captureState(t, f)
			checkLive(t, f, live)
			for _, id := range got {
				if v := st.pages[id]; v.typ != testType+1 || v.payload != string(payloadFor(id, 1, 80)) {
					t.Fatalf("allocated %v reads %d %.30q", id, v.typ, v.payload)
				}
			}
			if p := f.FreeListProof(); p.Lies != 0 {
				t.Fatalf("lies after an honest reopen: %+v", p)
			}
		})
	}
}

// TestFile_ProofQuarantineRemovesFreeFile: while the background proof has
// not finished, allocation goes on from the end of the file, checkpoints
// remove db.free and db.free.prev, and the next Open rebuilds the list by a
// scan.
func TestFile_ProofQuarantineRemovesFreeFile(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			fsys, dir := fsFor(t, name)
			live := proofStore(t, fsys, dir)
			lieFreeFile(t, fsys, dir, Range{3, 2})
			release := make(chan struct{})
			testProofGate = func() { <-release }
			defer func() { testProofGate = nil }()
			f, _, err := Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			pc := f.PageCount()
			for i := 0; i < 5; i++ {
				id, err := f.Allocate()
				if err != nil {
					t.Fatal(err)
				}
				if id != pc+PageID(i) {
					t.Fatalf("allocation %d: %v, want %v from the end of the file", i, id, pc+PageID(i))
				}
				if err := f.Write(id, testType, payloadFor(id, 2, 50)); err != nil {
					t.Fatal(err)
				}
				live[id] = payloadFor(id, 2, 50)
			}
			if p := f.FreeListProof(); p.Lies != 1 || p.FirstLie != 3 || p.Quarantined != 11 {
				t.Fatalf("proof %+v", p)
			}
			if err := f.Checkpoint(MetaUpdate{Root: 5}); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{freeFileName, freeFileName + prevSuffix} {
				if ok, err := vfs.Exists(fsys, filepath.Join(dir, n)); ok || err != nil {
					t.Fatalf("%s exists (%v) after a checkpoint with the list in quarantine", n, err)
				}
			}
			waited := make(chan struct{})
			go func() {
				f.WaitFreeListProof()
				close(waited)
			}()
			select {
			case <-waited:
				t.Fatal("WaitFreeListProof returned while the proof was held")
			case <-time.After(20 * time.Millisecond):
			}
			close(release)
			<-waited
			if p := f.FreeListProof(); p.Quarantined != 0 || p.Lies != 2 || p.Proven != 10 {
				t.Fatalf("proof after WaitFreeListProof %+v", p)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			f, rep, err := Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if rep.FreeListPath != FreeListScanned || !strings.Contains(rep.Reason, "missing") {
				t.Fatalf("reopen %+v", rep)
			}
			st := captureState(t, f)
			checkLive(t, f, live)
			if !slices.Equal(st.free, []Range{{13, 10}}) {
				t.Fatalf("scanned free list %v", st.free)
			}
		})
	}
}

// TestFile_ProofOwnerWritesAndFrees: the owner of a page the loaded list
// calls free may rewrite it in place or free it (the list lied, and the
// owner wins); a page that is stamped free is still refused as before.
func TestFile_ProofOwnerWritesAndFrees(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{5, 3})
	f, _ := mustOpen(t, mem, Options{})
	defer f.Close()
	if err := f.Write(13, testType, []byte("x")); err == nil || !strings.Contains(err.Error(), "free") {
		t.Fatalf("write of a free page: %v", err)
	}
	if err := f.Free(14); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("free of a free page: %v", err)
	}
	if p := f.FreeListProof(); p.Lies != 0 {
		t.Fatalf("lies after refusals: %+v", p)
	}
	if err := f.Write(5, testType, []byte("rewritten")); err != nil {
		t.Fatal(err)
	}
	live[5] = []byte("rewritten")
	if err := f.Free(6); err != nil {
		t.Fatal(err)
	}
	delete(live, 6)
	p := waitProof(t, f)
	if p.Lies != 3 || p.FirstLie != 5 || p.Proven != 10 {
		t.Fatalf("proof %+v", p)
	}
	if err := f.Free(7); err != nil {
		t.Fatal(err)
	}
	delete(live, 7)
	checkLive(t, f, live)
	if err := f.Checkpoint(MetaUpdate{Root: 3}); err != nil {
		t.Fatal(err)
	}
	st := captureState(t, f)
	if !slices.Equal(st.free, []Range{{6, 2}, {13, 10}}) {
		t.Fatalf("free list %v", st.free)
	}
}

// TestFile_ProofAllocateRun: runs, and the free range a run at the end of
// the file absorbs, are proven too.
func TestFile_ProofAllocateRun(t *testing.T) {
	mem := vfs.NewMem()
	live := proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{40, 3}, Range{11, 2})
	release := holdProof(t)
	f, _ := mustOpen(t, mem, Options{})
	defer f.Close()
	defer release() // before Close, which waits for the proof
	// 11..12 lie at the start of the first run of 12 (11..22).
	first, err := f.AllocateRun(12)
	if err != nil {
		t.Fatal(err)
	}
	if first != 43 {
		t.Fatalf("AllocateRun(12) = %v, want 43 (the end of the file)", first)
	}
	p := f.FreeListProof()
	if p.Lies != 1 || p.FirstLie != 11 {
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

	// The tail: a fresh open whose list ends at the page count with live
	// pages.
	mem = vfs.NewMem()
	live = proofStore(t, mem, "/db")
	lieFreeFile(t, mem, "/db", Range{40, 3})
	releaseG := holdProof(t)
	g, _ := mustOpen(t, mem, Options{})
	defer g.Close()
	defer releaseG() // before Close, which waits for the proof
	first, err = g.AllocateRun(11)
	if err != nil {
		t.Fatal(err)
	}
	if first != 43 {
		t.Fatalf("AllocateRun(11) = %v, want 43", first)
	}
	if p := g.FreeListProof(); p.Lies != 1 || p.FirstLie != 40 {
		t.Fatalf("proof %+v", p)
	}
	for id := first; id < first+11; id++ {
		if err := g.Write(id, testType, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkLive(t, g, live)
}

// TestFile_ProofNoLiesInNormalRuns: an honest db.free never fails its
// proof, through reopens, frees, runs and crashes of checkpoints; the
// loaded pages are proven as they are used.
func TestFile_ProofNoLiesInNormalRuns(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			fsys, dir := fsFor(t, name)
			var proven uint64
			for round := 0; round < 6; round++ {
				f, rep, err := Open(dir, Options{FS: fsys, PageSize: 1024})
				if err != nil {
					t.Fatal(err)
				}
				if round > 0 && rep.FreeListPath != FreeListTrusted {
					t.Fatalf("round %d: %+v", round, rep)
				}
				if err := workload(f, 4, uint64(round), nil); err != nil {
					t.Fatal(err)
				}
				p := f.FreeListProof()
				if p.Lies != 0 || p.Quarantined != 0 {
					t.Fatalf("round %d: proof %+v", round, p)
				}
				proven += p.Proven
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if proven == 0 {
				t.Fatal("no loaded page was ever proven")
			}
		})
	}
}

// TestInspect_FreeListLies: Inspect reads every page the trusted list
// calls free and counts those that are not.
func TestInspect_FreeListLies(t *testing.T) {
	mem := vfs.NewMem()
	proofStore(t, mem, "/db")
	in, err := Inspect(mem, "/db")
	if err != nil || in.Lies != 0 {
		t.Fatalf("honest: %v %+v", err, in)
	}
	lieFreeFile(t, mem, "/db", Range{5, 3})
	in, err = Inspect(mem, "/db")
	if err != nil {
		t.Fatal(err)
	}
	if in.TrustedFile != freeFileName || in.Lies != 3 || in.FirstLie != 5 || !strings.Contains(in.LieReason, "type 16") {
		t.Fatalf("lying: %+v", in)
	}
}

func TestFreeList_RemoveOverlap(t *testing.T) {
	l := newFreeList()
	for _, r := range []Range{{3, 4}, {10, 5}, {20, 1}} {
		if err := l.freeRange(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.overlap(Range{5, 16}); !slices.Equal(got, []Range{{5, 2}, {10, 5}, {20, 1}}) {
		t.Fatalf("overlap %v", got)
	}
	if got := l.overlap(Range{7, 3}); len(got) != 0 {
		t.Fatalf("overlap of a gap %v", got)
	}
	l.remove(Range{4, 8})
	if got := checkFreeList(t, l); !slices.Equal(got, []Range{{3, 1}, {12, 3}, {20, 1}}) {
		t.Fatalf("after remove %v", got)
	}
	l.remove(Range{0, 100})
	if l.count() != 0 || l.t.Len() != 0 {
		t.Fatalf("not empty: %v", l.ranges())
	}
}

// TestFile_ProofCrashWhileQuarantined crashes, at every mutating operation,
// a session whose loaded list lied: two checkpoints taken while the rest of
// the list waits for the background proof (each removes db.free and
// db.free.prev instead of writing them). Every image reopens with every
// live page intact: on the lying list again (only if no checkpoint of the
// session is durable; its proof catches the lie again) or by a scan.
func TestFile_ProofCrashWhileQuarantined(t *testing.T) {
	base := vfs.NewMem()
	live := proofStore(t, base, "/db")
	lieFreeFile(t, base, "/db", Range{4, 2})
	in, err := Inspect(base, "/db")
	if err != nil {
		t.Fatal(err)
	}
	baseID := in.Meta.ID
	defer func() { testProofGate = nil }()
	paths := map[string]int{}
	for k := 1; ; k++ {
		release := make(chan struct{})
		testProofGate = func() { <-release }
		cr := kdbtest.CrashAt(base.Clone(), k, vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(k)})
		f, _, err := Open("/db", Options{FS: cr.FS()})
		if err != nil {
			close(release)
			t.Fatalf("k=%d: open before the crash: %v", k, err)
		}
		werr := func() error {
			for round := 0; round < 2; round++ {
				for i := 0; i < 3; i++ {
					id, err := f.Allocate()
					if err != nil {
						return err
					}
					if live[id] != nil {
						t.Fatalf("k=%d: live %v allocated", k, id)
					}
					if err := f.Write(id, testType+1, payloadFor(id, 9, 30)); err != nil {
						return err
					}
				}
				if err := f.Checkpoint(MetaUpdate{Root: 3}); err != nil {
					return err
				}
			}
			return nil
		}()
		close(release)
		_ = f.Close()
		testProofGate = nil
		img := cr.Image()

		g, rep, err := Open("/db", Options{FS: img})
		if err != nil {
			t.Fatalf("k=%d: reopen: %v", k, err)
		}
		if rep.FreeListPath == FreeListTrusted && rep.MetaID != baseID {
			t.Fatalf("k=%d: trusted a free list at %v, after the session's first checkpoint", k, rep.MetaID)
		}
		paths[rep.FreeListPath]++
		checkLive(t, g, live)
		for i := 0; i < 20; i++ {
			id, err := g.Allocate()
			if err != nil {
				t.Fatal(err)
			}
			if live[id] != nil {
				t.Fatalf("k=%d: reopened (%s): live %v allocated", k, rep.FreeListPath, id)
			}
			if err := g.Write(id, testType+2, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Checkpoint(MetaUpdate{Root: 3}); err != nil {
			t.Fatal(err)
		}
		checkLive(t, g, live)
		_ = g.Close()
		if werr == nil && !cr.Crashed() {
			if paths[FreeListTrusted] == 0 || paths[FreeListScanned] == 0 {
				t.Fatalf("free-list paths of the reopens: %v", paths)
			}
			break
		}
	}
}
