package pagefile

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// longTests reports whether the long sweeps run (KDB_LONG=1).
func longTests() bool { return os.Getenv("KDB_LONG") != "" }

type pageVal struct {
	typ     PageType
	payload string
}

// storeState is everything a checkpoint fixes: the meta and every page.
type storeState struct {
	meta  Meta
	pages map[PageID]pageVal // pages in use
	free  []Range
}

func (s storeState) String() string {
	return fmt.Sprintf("checkpoint %v (page count %d, %d pages in use, free %v)", s.meta.ID, s.meta.PageCount, len(s.pages), s.free)
}

// captureState reads the whole state of a File with no dirty pages and
// checks that every page below the page count is exactly one of free
// (and stamped PageFree) or in use.
func captureState(t testing.TB, f *File) storeState {
	t.Helper()
	if n := f.DirtyCount(); n != 0 {
		t.Fatalf("captureState with %d dirty pages", n)
	}
	s := storeState{meta: f.Meta(), pages: map[PageID]pageVal{}, free: f.FreeRanges()}
	if PageID(s.meta.PageCount) != f.PageCount() {
		t.Fatalf("meta page count %d != PageCount %d", s.meta.PageCount, f.PageCount())
	}
	isFree := map[PageID]bool{}
	for _, r := range s.free {
		if r.Start < FirstDataPage || uint64(r.End()) > s.meta.PageCount {
			t.Fatalf("free range %v outside [%d, %d)", r, FirstDataPage, s.meta.PageCount)
		}
		for id := r.Start; id < r.End(); id++ {
			isFree[id] = true
		}
	}
	for id := FirstDataPage; uint64(id) < s.meta.PageCount; id++ {
		typ, p, err := f.Read(id)
		if err != nil {
			t.Fatalf("Read(%v): %v", id, err)
		}
		switch {
		case isFree[id] && typ != PageFree:
			t.Fatalf("%v is on the free list but has type %d", id, typ)
		case !isFree[id] && typ == PageFree:
			t.Fatalf("%v is stamped free but not on the free list (lost)", id)
		case !isFree[id]:
			s.pages[id] = pageVal{typ, string(p)}
		}
	}
	return s
}

// equalState compares two states; it returns "" if equal, else the first
// difference. Checkpoint IDs are compared whole only with sameRun (the
// random part differs between runs of the same workload).
func equalState(a, b storeState, sameRun bool) string {
	switch {
	case a.meta.Seq != b.meta.Seq || a.meta.ID.Seq != a.meta.Seq || (sameRun && a.meta.ID != b.meta.ID):
		return fmt.Sprintf("checkpoint %v != %v", a.meta.ID, b.meta.ID)
	case a.meta.PageCount != b.meta.PageCount || a.meta.Root != b.meta.Root ||
		a.meta.ReplaySegment != b.meta.ReplaySegment || a.meta.ReplayOffset != b.meta.ReplayOffset ||
		!bytes.Equal(a.meta.App, b.meta.App) || a.meta.PageSize != b.meta.PageSize:
		return fmt.Sprintf("meta %+v != %+v", a.meta, b.meta)
	case !slices.Equal(a.free, b.free):
		return fmt.Sprintf("free list %v != %v", a.free, b.free)
	case !maps.Equal(a.pages, b.pages):
		for id, v := range a.pages {
			if b.pages[id] != v {
				return fmt.Sprintf("%v: %d %.30q != %d %.30q", id, v.typ, v.payload, b.pages[id].typ, b.pages[id].payload)
			}
		}
		return fmt.Sprintf("%d pages != %d pages", len(a.pages), len(b.pages))
	}
	return ""
}

// livePages returns the pages in use of f, sorted.
func livePages(f *File) []PageID {
	free := map[PageID]bool{}
	for _, r := range f.FreeRanges() {
		for id := r.Start; id < r.End(); id++ {
			free[id] = true
		}
	}
	var live []PageID
	for id := FirstDataPage; id < f.PageCount(); id++ {
		if !free[id] {
			live = append(live, id)
		}
	}
	return live
}

// workload runs rounds of frees, allocations (single and runs), rewrites
// and a checkpoint each, deterministically from seed. It stops at the
// first error. after is called after each completed checkpoint.
func workload(f *File, rounds int, seed uint64, after func(round int)) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	live := livePages(f)
	write := func(id PageID, ver int) error {
		n := rng.IntN(f.PayloadSize() + 1)
		return f.Write(id, PageType(16+rng.IntN(4)), payloadFor(id, ver, max(n, 24)))
	}
	for r := 1; r <= rounds; r++ {
		for i := 0; i < len(live)/4; i++ {
			j := rng.IntN(len(live))
			if err := f.Free(live[j]); err != nil {
				return err
			}
			live = slices.Delete(live, j, j+1)
		}
		for i := 0; i < 3; i++ {
			id, err := f.Allocate()
			if err != nil {
				return err
			}
			if err := write(id, r); err != nil {
				return err
			}
			live = append(live, id)
		}
		n := 2 + rng.IntN(6)
		first, err := f.AllocateRun(n)
		if err != nil {
			return err
		}
		for id := first; id < first+PageID(n); id++ {
			if err := write(id, r); err != nil {
				return err
			}
			live = append(live, id)
		}
		for i := 0; i < 3 && len(live) > 0; i++ {
			if err := write(live[rng.IntN(len(live))], r); err != nil {
				return err
			}
		}
		root := live[rng.IntN(len(live))]
		if err := f.Checkpoint(MetaUpdate{Root: root, ReplaySegment: uint64(r), ReplayOffset: uint64(r) * 100, App: []byte(strings.Repeat("a", r))}); err != nil {
			return err
		}
		if after != nil {
			after(r)
		}
	}
	return nil
}

// newBase creates a store on a fresh MemFS with pages pages written and
// checkpointed, and closes it.
func newBase(t testing.TB, opts Options, pages int) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewMem()
	f, _ := mustOpen(t, mem, opts)
	first, err := f.AllocateRun(pages)
	if err != nil {
		t.Fatal(err)
	}
	for id := first; id < first+PageID(pages); id++ {
		if err := f.Write(id, testType, payloadFor(id, 0, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return mem
}
