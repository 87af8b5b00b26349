package pagefile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

var crashTestOpts = Options{PageSize: 512, GrowBy: 2048}

const crashRounds = 4

// reference runs the workload on a copy of base without crashing and
// records, for each checkpoint i (1-based), the state it fixes, the index
// (among mutating operations) of its db.redo sync and the number of
// mutating operations when it returned. states[0] is the state at open.
type reference struct {
	states    []storeState
	redoWrite []int // the last write of checkpoint i's batch to db.redo (its trailer)
	redoSync  []int
	end       []int
	total     int
}

func runReference(t *testing.T, base *vfs.MemFS, rounds int, seed uint64) reference {
	t.Helper()
	ref := reference{redoWrite: make([]int, rounds+1), redoSync: make([]int, rounds+1), end: make([]int, rounds+1)}
	muts, lastRedoWrite, lastRedoSync := 0, 0, 0
	fsys := vfs.Intercept(base.Clone(), func(e vfs.Event) error {
		if e.Op.Mutating() {
			muts++
			if e.Op == vfs.OpSync && strings.HasSuffix(e.Path, redoFileName) {
				lastRedoSync = muts
			}
			if e.Op == vfs.OpTruncate && strings.HasSuffix(e.Path, redoFileName) {
				lastRedoWrite = muts - 1 // the trailer write precedes the truncate
			}
		}
		return nil
	})
	f, _ := mustOpen(t, fsys, crashTestOpts)
	ref.states = append(ref.states, captureState(t, f))
	err := workload(f, rounds, seed, func(r int) {
		ref.redoWrite[r], ref.redoSync[r], ref.end[r] = lastRedoWrite, lastRedoSync, muts
		ref.states = append(ref.states, captureState(t, f))
	})
	if err != nil {
		t.Fatalf("reference workload: %v", err)
	}
	ref.total = muts
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return ref
}

// allowed returns the checkpoints a crash at mutating operation k may
// yield: the last one whose commit returned before k, and the next one if
// its db.redo sync returned before k. When the crash keeps unsynced writes
// (keep), a db.redo whose writes were all issued may survive whole without
// its sync, so the next one is also allowed once its last db.redo write ran.
func (ref reference) allowed(k int, keep bool) []int {
	lo := 0
	for i := 1; i < len(ref.end); i++ {
		if ref.end[i] < k {
			lo = i
		}
	}
	out := []int{lo}
	if lo+1 < len(ref.end) && (ref.redoSync[lo+1] < k || (keep && ref.redoWrite[lo+1] < k)) {
		out = append(out, lo+1)
	}
	return out
}

// checkRecovered opens img, checks that it holds exactly one of the allowed
// states, that a forced scan gives the same free list, and that the store
// takes one more checkpoint. It returns the matched state index.
func checkRecovered(t *testing.T, img *vfs.MemFS, ref reference, allowed []int, what string) int {
	t.Helper()
	f, rep, err := Open("/db", Options{FS: img, GrowBy: crashTestOpts.GrowBy})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	got := captureState(t, f)
	match, why := -1, ""
	for _, i := range allowed {
		if d := equalState(got, ref.states[i], false); d == "" {
			match = i
			break
		} else {
			why += fmt.Sprintf("\n  vs checkpoint #%d: %s", i, d)
		}
	}
	if match < 0 {
		t.Fatalf("%s: reopened %v, report %+v; allowed %v:%s", what, got, rep, allowed, why)
	}
	// The scan must agree with whatever path Open took.
	g, srep, err := Open("/db", Options{FS: img, ReadOnly: true, ForceScan: true})
	if err != nil {
		t.Fatalf("%s: forced scan: %v", what, err)
	}
	if d := equalState(captureState(t, g), got, true); d != "" || srep.FreeListPath != FreeListScanned ||
		srep.PagesScanned != got.meta.PageCount-uint64(FirstDataPage) {
		t.Fatalf("%s: forced scan differs (%s), report %+v", what, d, srep)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// The recovered store is usable: one more round, then a clean reopen
	// trusts db.free and finds it.
	if err := workload(f, 1, 99, nil); err != nil {
		t.Fatalf("%s: workload after recovery: %v", what, err)
	}
	// A recovered free list is honest: no page of it fails its proof.
	if p := f.FreeListProof(); p.Lies != 0 || p.Quarantined != 0 {
		t.Fatalf("%s: free list proof after recovery: %+v", what, p)
	}
	after := captureState(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	h, hrep, err := Open("/db", Options{FS: img})
	if err != nil {
		t.Fatalf("%s: second reopen: %v", what, err)
	}
	if d := equalState(captureState(t, h), after, true); d != "" || hrep.FreeListPath != FreeListTrusted {
		t.Fatalf("%s: second reopen: %s, report %+v", what, d, hrep)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	return match
}

// TestFile_CrashAtEveryWrite crashes a workload of crashRounds checkpoints
// (with frees, single and run allocations and rewrites between them) at
// every mutating operation, under several crash models, and checks that
// each reopen yields exactly the last completed checkpoint (or the one in
// progress, if its db.redo was synced), whole.
func TestFile_CrashAtEveryWrite(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	ref := runReference(t, base, crashRounds, 1)
	settings := []vfs.CrashOptions{
		{KeepUnsynced: 0},
		{KeepUnsynced: 1},
		{KeepUnsynced: 0.5, Seed: 1},
		{KeepUnsynced: 0.5, GarbageUnsynced: 0.25, Seed: 2},
	}
	if longTests() {
		for s := int64(3); s < 23; s++ {
			settings = append(settings,
				vfs.CrashOptions{KeepUnsynced: 0.3, Seed: s},
				vfs.CrashOptions{KeepUnsynced: 0.7, GarbageUnsynced: 0.2, Seed: s})
		}
	}
	for _, o := range settings {
		t.Run(fmt.Sprintf("keep=%v/garbage=%v/seed=%d", o.KeepUnsynced, o.GarbageUnsynced, o.Seed), func(t *testing.T) {
			seen := crashLoop(t, base, ref, crashRounds, 1, o)
			for i := range ref.states {
				if seen[i] == 0 {
					t.Errorf("no crash point recovered checkpoint #%d: %v", i, seen)
				}
			}
		})
	}
}

// crashLoop opens a copy of base and runs the workload, crashing at every
// mutating operation k in turn, and checks each crash image. It returns how
// many crash points recovered each checkpoint of ref.
func crashLoop(t *testing.T, base *vfs.MemFS, ref reference, rounds int, seed uint64, o vfs.CrashOptions) map[int]int {
	t.Helper()
	seen := map[int]int{}
	for k := 1; k <= ref.total+1; k++ {
		c := kdbtest.CrashAt(base.Clone(), k, vfs.CrashOptions{KeepUnsynced: o.KeepUnsynced, GarbageUnsynced: o.GarbageUnsynced, Seed: o.Seed + int64(k)*1000})
		f, _, err := Open("/db", Options{FS: c.FS(), GrowBy: crashTestOpts.GrowBy})
		if err == nil {
			err = workload(f, rounds, seed, nil)
			_ = f.Close()
		}
		if c.Crashed() != (k <= ref.total) || (err == nil) != (k > ref.total) {
			t.Fatalf("k=%d: crashed=%v err=%v, total %d", k, c.Crashed(), err, ref.total)
		}
		got := checkRecovered(t, c.Image(), ref, ref.allowed(k, o.KeepUnsynced > 0), fmt.Sprintf("crash at write %d", k))
		seen[got]++
	}
	return seen
}

// lyingFS fails Sync of db.data without syncing or dropping anything: the
// state a process crash at the in-place sync of a checkpoint leaves (the
// bytes are in the page cache, not on disk, and the commit went no further).
type lyingFS struct{ vfs.FS }

type lyingFile struct{ vfs.File }

func (l lyingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := l.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, dataFileName) {
		return f, err
	}
	return lyingFile{f}, nil
}

var errProcessCrash = errors.New("test: process crash at the db.data sync")

func (lyingFile) Sync() error { return errProcessCrash }

// TestFile_CrashAfterUnsyncedRecovery: a checkpoint's in-place writes reach
// only the page cache (process crash before the db.data sync); the reopen
// finds db.data equal to db.redo and does not sync it. A power loss during
// the next checkpoint must still find a whole checkpoint: db.data is synced
// before db.redo is overwritten.
func TestFile_CrashAfterUnsyncedRecovery(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	// The checkpoint as it completes normally...
	g, _ := mustOpen(t, base.Clone(), crashTestOpts)
	if err := workload(g, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	want := captureState(t, g)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// ...and interrupted at the db.data sync.
	f, _ := mustOpen(t, lyingFS{base}, crashTestOpts)
	if err := workload(f, 1, 1, nil); !errors.Is(err, errProcessCrash) {
		t.Fatalf("workload: %v", err)
	}
	_ = f.Close()
	ref := runReference(t, base, 2, 2)
	if d := equalState(ref.states[0], want, false); d != "" {
		t.Fatalf("reopen after the interrupted checkpoint: %s", d)
	}
	crashLoop(t, base, ref, 2, 2, vfs.CrashOptions{KeepUnsynced: 0})
}

// TestFile_CrashDuringCreation crashes the creation of a store and its
// first checkpoint at every mutating operation: the image reopens (or is
// created afresh) to the empty store or to the first checkpoint, whole.
func TestFile_CrashDuringCreation(t *testing.T) {
	for _, o := range []vfs.CrashOptions{{KeepUnsynced: 0}, {KeepUnsynced: 0.5, GarbageUnsynced: 0.2, Seed: 3}} {
		sawNew, sawEmpty := false, false
		for k := 1; ; k++ {
			c := kdbtest.CrashAt(vfs.NewMem(), k, o)
			f, _, err := Open("/db", Options{FS: c.FS(), PageSize: 512})
			if err == nil {
				first, aerr := f.AllocateRun(5)
				for id := first; aerr == nil && id < first+5; id++ {
					aerr = f.Write(id, testType, payloadFor(id, 1, 60))
				}
				if aerr == nil {
					err = f.Checkpoint(MetaUpdate{Root: first})
				} else {
					err = aerr
				}
				_ = f.Close()
			}
			done := !c.Crashed()
			if done && err != nil {
				t.Fatalf("k=%d: no crash, error %v", k, err)
			}
			g, rep, err := Open("/db", Options{FS: c.Image()})
			if err != nil {
				t.Fatalf("k=%d: reopen: %v", k, err)
			}
			s := captureState(t, g)
			switch {
			case s.meta.Seq == 0 && s.meta.PageCount == uint64(FirstDataPage) && len(s.pages) == 0 && len(s.free) == 0:
				sawEmpty = true
			case s.meta.Seq == 1 && s.meta.PageCount == uint64(FirstDataPage)+5 && len(s.pages) == 5 && s.meta.Root == FirstDataPage:
				sawNew = true
				for id, v := range s.pages {
					if v.payload != string(payloadFor(id, 1, 60)) {
						t.Fatalf("k=%d: %v holds %q", k, id, v.payload)
					}
				}
			default:
				t.Fatalf("k=%d: reopened %v, report %+v", k, s, rep)
			}
			if done && s.meta.Seq != 1 {
				t.Fatalf("completed run reopened %v", s)
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
		}
		if !sawEmpty || !sawNew {
			t.Fatalf("%+v: saw empty %v, new %v", o, sawEmpty, sawNew)
		}
	}
}
